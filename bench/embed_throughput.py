"""Throughput of the offline embedder (LocalEmbedder, MiniLM) on short chat messages.

Embeds N generated messages of 5-40 words at several batch sizes and torch
thread counts, on ONNX Runtime at several batch sizes, plus ``LocalEmbedder().embed``
exactly as shipped (ONNX Runtime when installed) and on torch. Settings run
interleaved for ``--rounds`` rounds so a neighbour's load hits them alike; the
best round per setting is reported (texts/s).

    python bench/embed_throughput.py            # 2,000 texts, 2 rounds
    python bench/embed_throughput.py --texts 500 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import write_results

# The weights ship in a package: never reach for the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_VOCAB = (
    "i you we they it the a an to of and in on for with at by from about my your our "
    "can could would should will do did does is was are were be been have has had "
    "remind me tomorrow meeting lunch dinner flight hotel booking order refund ticket "
    "please thanks sorry great okay sure maybe later today tonight week month year "
    "doctor appointment allergic peanuts coffee tea morning evening project deadline "
    "report budget email call phone address birthday party gift daughter son wife "
    "husband friend team manager client invoice payment card bank account password "
    "login error bug deploy server database backup weather rain trip paris london "
    "train bus car parking gym run yoga book movie music playlist recipe vegetarian"
)
_WORDS = tuple(_VOCAB.split())


def make_texts(count: int, seed: int = 14) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(_WORDS, k=rng.randint(5, 40))) for _ in range(count)]


def _encode(model, texts: list[str], batch_size: int) -> None:
    model.encode(
        texts,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", default="32,64,128,256")
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()

    import torch

    from fastaiagent.kb.embedding import LocalEmbedder, _load_local_model, local_model_path

    texts = make_texts(args.texts)
    default_threads = torch.get_num_threads()
    shipped = LocalEmbedder()
    model = _load_local_model(local_model_path(), "cpu")
    shipped.embed(texts[:64])  # warm-up: weights paged in, kernels chosen

    LocalEmbedder(backend="torch").embed(texts[:64])
    settings: list[tuple[str, int, int]] = [
        ("shipped", default_threads, shipped.batch_size),
        ("shipped-torch", default_threads, shipped.batch_size),
    ]
    for batch in (int(b) for b in args.batches.split(",")):
        settings.append(("onnx", os.cpu_count() or 1, batch))
    for threads in (int(t) for t in args.threads.split(",")):
        for batch in (int(b) for b in args.batches.split(",")):
            settings.append(("encode", threads, batch))

    best: dict[str, float] = {}
    for rnd in range(args.rounds):
        for kind, threads, batch in settings:
            torch.set_num_threads(threads)
            start = time.perf_counter()
            if kind == "shipped":
                LocalEmbedder().embed(texts)
            elif kind == "shipped-torch":
                LocalEmbedder(backend="torch").embed(texts)
            elif kind == "onnx":
                LocalEmbedder(backend="onnx", batch_size=batch).embed(texts)
            else:
                _encode(model, texts, batch)
            rate = len(texts) / (time.perf_counter() - start)
            key = f"{kind} threads={threads} batch={batch}"
            best[key] = max(best.get(key, 0.0), rate)
            print(f"round {rnd + 1} {key:32s} {rate:8.1f} texts/s", flush=True)
        torch.set_num_threads(default_threads)

    print("\nbest of rounds (texts/s):")
    for key, rate in best.items():
        print(f"  {key:32s} {rate:8.1f}")
    write_results(
        "embed_throughput",
        {
            "texts": args.texts,
            "words_per_text": "5-40",
            "torch_default_threads": default_threads,
            "cpu_count": os.cpu_count(),
            "loadavg_1m": os.getloadavg()[0],
            "best_texts_per_s": {k: round(v, 1) for k, v in best.items()},
        },
    )


if __name__ == "__main__":
    main()
