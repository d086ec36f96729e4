"""A tiny synthetic YOLO detection dataset (PNG images + labels + data yaml), for tests and benchmarks.

No downloads exist on clusters' test machines, and none are needed: coloured rectangles on a noisy
background are enough for ultralytics to train, validate and write every file a real run writes.
Pure Python (zlib PNG), so it runs where PIL is not installed.
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

COLOURS = ((220, 40, 40), (40, 200, 60))  # one per class


def _png(width: int, height: int, pixels: bytearray) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    stride = width * 3
    raw = b"".join(b"\x00" + bytes(pixels[y * stride : (y + 1) * stride]) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


def image(size: int, rng: random.Random, objects: tuple[int, int] = (1, 3)) -> tuple[bytes, list[str]]:
    """One image with ``objects`` (min, max) boxes, and its YOLO label lines."""
    base = rng.randrange(60, 120)
    pixels = bytearray(bytes((base,)) * (size * size * 3))
    labels = []
    for _ in range(rng.randint(*objects)):
        cls = rng.randrange(len(COLOURS))
        w, h = rng.randint(size // 6, size // 2), rng.randint(size // 6, size // 2)
        x0, y0 = rng.randrange(0, size - w), rng.randrange(0, size - h)
        colour = bytes(COLOURS[cls])
        for y in range(y0, y0 + h):
            start = (y * size + x0) * 3
            pixels[start : start + 3 * w] = colour * w
        labels.append(f"{cls} {(x0 + w / 2) / size:.6f} {(y0 + h / 2) / size:.6f} {w / size:.6f} {h / size:.6f}")
    return _png(size, size, pixels), labels


def make_dataset(
    root: Path, train: int = 16, val: int = 8, size: int = 96, seed: int = 0, objects: tuple[int, int] = (1, 3)
) -> Path:
    """Write ``root/{images,labels}/{train,val}`` and ``root/data.yaml``; returns the yaml path.

    Source resolution and objects per image change training speed at the same imgsz (the loader
    resizes, the loss assigns targets), so benchmarks vary both."""
    rng = random.Random(seed)
    for split, n in (("train", train), ("val", val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            png, labels = image(size, rng, objects)
            (root / "images" / split / f"{i:05d}.png").write_bytes(png)
            (root / "labels" / split / f"{i:05d}.txt").write_text("\n".join(labels) + "\n")
    yaml_path = root / "data.yaml"
    yaml_path.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n  0: red\n  1: green\n")
    return yaml_path


def train_run(project: Path, name: str, **args: object) -> Path:
    """One real ultralytics CPU training run in this process (needs the [train] extra); its run folder.

    Callers set YOLO_OFFLINE and a YOLO_CONFIG_DIR holding a font first, as jobs do.
    """
    from ultralytics import YOLO

    model = str(args.pop("model", "yolov8n.yaml"))
    settings = {"pretrained": False, "device": "cpu", "workers": 0, "plots": False, "verbose": False, "exist_ok": True}
    YOLO(model).train(project=str(project), name=name, **{**settings, **args})
    return project / name
