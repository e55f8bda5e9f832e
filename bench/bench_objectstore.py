"""Object store put/get of screenshots: local directory vs S3 (moto server + minio client).

The workload is what a round writes: N screenshots, a quarter of them repeats of earlier
ones (the same screen seen again), stored content-addressed with `put_blob`, then all
read back. Usage: python -m bench.bench_objectstore [--screens N]
"""

from __future__ import annotations

import argparse
import io
import logging
import random
import socket
import tempfile
from pathlib import Path

from moto.server import ThreadedMotoServer
from PIL import Image, ImageDraw

from bench.common import table, timed
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore, ObjectStore, S3ObjectStore, put_blob
from trajforge.settings import S3Settings

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--screens 20"


def screenshots(n: int, seed: int = 0) -> list[bytes]:
    """n phone-sized PNGs; about 25% repeat an earlier one byte for byte."""
    rng = random.Random(seed)
    base = Image.new("RGB", (1080, 2400), "white")
    draw = ImageDraw.Draw(base)
    for i in range(12):
        draw.rectangle((60, 200 + i * 180, 1020, 340 + i * 180), outline="#999", width=3)
    unique: list[bytes] = []
    out: list[bytes] = []
    for _ in range(n):
        if unique and rng.random() < 0.25:
            out.append(rng.choice(unique))
            continue
        img = base.copy()
        d = ImageDraw.Draw(img)
        d.text((80, 80 + len(unique) % 40), f"screen {len(unique)}", fill="black", font_size=64)
        for _ in range(30):
            x, y = rng.randrange(0, 1000), rng.randrange(300, 2300)
            d.rectangle((x, y, x + 60, y + 30), fill=(rng.randrange(256), rng.randrange(256), 128))
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)
        unique.append(buf.getvalue())
        out.append(unique[-1])
    return out


def run(store: ObjectStore, shots: list[bytes]) -> list[str]:
    def put_all() -> tuple[list[str], int]:
        digests, written = [], 0
        for png in shots:
            digest, new = put_blob(store, png)
            digests.append(digest)
            written += new
        return digests, written

    (digests, written), t_put = timed(put_all)
    _, t_get = timed(lambda: [store.get(blob_key(d)) for d in digests])
    mb = sum(len(s) for s in shots) / 1e6
    return [
        f"{len(shots) / t_put:,.0f}",
        f"{len(shots) / t_get:,.0f}",
        f"{mb / t_put:,.1f}",
        f"{written}",
        f"{len(shots) - written}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--screens", type=int, default=2000)
    args = parser.parse_args()
    shots, t_gen = timed(lambda: screenshots(args.screens))
    avg_kb = sum(map(len, shots)) / len(shots) / 1024
    print(f"(generated {len(shots)} screenshots, {avg_kb:.0f} KiB average, in {t_gen:.1f}s)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(["local", *run(LocalObjectStore(Path(tmp)), shots)])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s3 = S3ObjectStore.connect(
            S3Settings(endpoint=f"127.0.0.1:{port}", access_key="bench", secret_key="bench", bucket="bench")
        )
        rows.append(["s3 (moto)", *run(s3, shots)])
    finally:
        server.stop()
    local_put, s3_put = float(rows[0][1].replace(",", "")), float(rows[1][1].replace(",", ""))
    print(
        table(
            f"put_blob + get of {args.screens:,} screenshots",
            ["store", "put/s", "get/s", "put MB/s", "stored", "deduplicated"],
            rows,
        )
    )
    print(f"local / s3 put ratio: {local_put / s3_put:.1f}x\n")


if __name__ == "__main__":
    main()
