"""Stops TensorFlow 2.14's leak of a few dozen bytes per EagerTensor on Python 3.11.

TF's `EagerTensor` type subclasses a Python class, so on Python 3.11 it inherits a
*managed* `__dict__`: `object.__new__`, which the type uses, gives every instance an
array of inline attribute values, and only CPython's own deallocator frees that array.
EagerTensor has its own (`EagerTensor_dealloc`), which does not. So every tensor that
Python ever sees leaves its values array behind: a learner that also serves inference
makes several per batch and grew ~400 MiB an hour in `benchmarks/soak.py` (CartPole, ~360
inference batches and ~18 learner steps a second; measured per tensor and per policy step
by `benchmarks/eager_tensor_leak.py`). The project pins TF 2.14.1 (dm-reverb 0.14.0 is
built against it) and Python 3.11, so we cannot take a fixed TensorFlow.

The fix: give the type `PyType_GenericNew` as its `tp_new`, which allocates exactly as
`object.__new__` does but creates no values array. CPython 3.11 handles a managed-dict
object without one (the state of an object whose `__dict__` was materialized): reading a
missing attribute finds nothing, setting one creates a dict. The memory layout of every
instance is unchanged, so tensors made before the patch are freed as before. Applied only
where the facts it relies on are checked at run time: CPython 3.11, the type's managed-dict
flag, its `tp_new` being `object.__new__`'s, and the slot's offset (`object`'s neighbouring
`tp_alloc` and `tp_free` slots hold the functions CPython puts there).
"""

from __future__ import annotations

import ctypes
import sys

_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT (CPython 3.11's Include/object.h)
# In a 64-bit CPython 3.11 PyTypeObject, `tp_alloc`, `tp_new` and `tp_free` follow 38
# pointer-sized fields; checked against `object`'s known `tp_alloc` and `tp_free`.
_WORD = ctypes.sizeof(ctypes.c_void_p)
_TP_ALLOC_OFFSET, _TP_NEW_OFFSET, _TP_FREE_OFFSET = 38 * _WORD, 39 * _WORD, 40 * _WORD


def _slot(type_: type, offset: int) -> ctypes.c_void_p:
    return ctypes.c_void_p.from_address(id(type_) + offset)


def stop_eager_tensor_leak() -> bool:
    """Patches TF's EagerTensor type once per process; True if it is (now or already)
    patched, False where the leak's preconditions do not hold (then nothing is touched)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11) \
            or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    from tensorflow.python.framework import ops

    def address(name: str) -> int:
        return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value

    if (_slot(object, _TP_ALLOC_OFFSET).value != address("PyType_GenericAlloc")
            or _slot(object, _TP_FREE_OFFSET).value != address("PyObject_Free")):
        return False  # not the layout this patch knows
    eager_tensor = ops.EagerTensor
    object_new = _slot(object, _TP_NEW_OFFSET).value
    generic_new = address("PyType_GenericNew")
    new_slot = _slot(eager_tensor, _TP_NEW_OFFSET)
    if new_slot.value == generic_new:  # patched before
        return True
    if not eager_tensor.__flags__ & _MANAGED_DICT or new_slot.value != object_new \
            or "__new__" in eager_tensor.__dict__:
        return False
    new_slot.value = generic_new
    return True
