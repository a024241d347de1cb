"""Gameplay videos: the frames of one game, the running score drawn on each, as MP4 or GIF.

Frames are the network's own input (the newest frame of the stacked observation,
model.frame_size square), scaled up by an integer factor with nearest-neighbour pixels, so
the video shows exactly what the agent saw.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dba3c.errors import UserError

FORMATS = (".mp4", ".gif")


def frame_image(obs_i: np.ndarray, score: float, t: int, scale: int = 4) -> np.ndarray:
    """One video frame from one env's observation.

    Args:
      obs_i: uint8 [stack, H, W] (grayscale) or [stack, H, W, 3] (rgb).
      score: the game score so far; t: the agent step. Both are drawn in the top-left
        corner (so no two frames are identical and GIF writers keep every one).
    Returns:
      uint8 [H * scale, W * scale, 3].
    """
    from PIL import Image, ImageDraw

    newest = obs_i[-1]
    rgb = np.repeat(newest[..., None], 3, axis=-1) if newest.ndim == 2 else newest
    big = np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)
    image = Image.fromarray(np.ascontiguousarray(big))
    ImageDraw.Draw(image).text((4, 2), f"score {score:g}  t {t}", fill=(255, 64, 64))
    return np.asarray(image)


def check_video_path(path: str) -> None:
    """UserError unless ``path`` names a format :func:`write_video` writes."""
    if Path(path).suffix not in FORMATS:
        raise UserError(f"--video {path}: the file name must end in {' or '.join(FORMATS)}")


def write_video(path: str, frames: list[np.ndarray], fps: int = 15) -> Path:
    """Write ``frames`` (uint8 [H, W, 3] each) as MP4 (H.264) or GIF, chosen by the suffix."""
    import imageio.v3 as iio

    check_video_path(path)
    out = Path(path)
    if not frames:
        raise UserError(f"--video {out}: the game produced no frames")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".mp4":
        iio.imwrite(out, np.stack(frames), fps=fps, codec="libx264", macro_block_size=1)
    else:
        iio.imwrite(out, np.stack(frames), duration=1000 / fps, loop=0)
    return out
