"""Recorded episodes: the on-disk format, writing them as they end, reading them back,
and turning them into replay for a learner (offline / batch RL)."""

from seed_agents.datasets.format import DatasetError, DatasetSpec, read_spec
from seed_agents.datasets.reader import episode_dataset, iterate_episodes, open_dataset
from seed_agents.datasets.replay import as_offline_table, load_replay
from seed_agents.datasets.writer import DatasetWriter, EpisodeRecorder, RecordingAdder

__all__ = [
    "DatasetError",
    "DatasetSpec",
    "DatasetWriter",
    "EpisodeRecorder",
    "RecordingAdder",
    "episode_dataset",
    "iterate_episodes",
    "as_offline_table",
    "load_replay",
    "open_dataset",
    "read_spec",
]
