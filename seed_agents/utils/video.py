"""MP4 videos of RGB frames, through imageio and the ffmpeg binary its wheel bundles."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


class VideoWriter:
    """Writes `[H, W, 3]` uint8 frames to an H.264 MP4 file (yuv420p, which players expect).

    yuv420p needs even sides: a frame with an odd height or width is padded by one row or
    column repeating its edge, never resized. Every frame must have the first one's size.
    Use as a context manager, or call `close`.
    """

    def __init__(self, path: str | os.PathLike[str], fps: float):
        import imageio.v2 as imageio

        if fps <= 0:
            raise ValueError(f"fps must be > 0, got {fps}.")
        self.path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        self._writer: Any = imageio.get_writer(
            self.path, fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=1,
            ffmpeg_log_level="error")
        self.frames = 0
        self._shape: tuple[int, ...] | None = None

    def write(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"A video frame is [H, W, 3] uint8, got {frame.shape} "
                             f"{frame.dtype}.")
        if self._shape is None:
            self._shape = frame.shape
        elif frame.shape != self._shape:
            raise ValueError(f"Frame {self.frames} is {frame.shape}; the video's frames are "
                             f"{self._shape}.")
        height, width = frame.shape[:2]
        if height % 2 or width % 2:
            frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
