"""How long one part of a run waits for another to start: one generous bound everywhere.

Starting is work whose length depends on the machine: a learner imports TensorFlow and
builds its networks, a service starts its threads, Reverb loads a checkpoint. On a
2-core machine with both cores busy one such start took over 180 s, and a 30 s wait for
the inference service failed a learner that was merely slow. Every wait for a start is
for the event (an address published, a call answered), bounded by this, and says what it
waited for when the bound runs out; the bound only catches what hangs.
"""

START_TIMEOUT_S = 600.0
