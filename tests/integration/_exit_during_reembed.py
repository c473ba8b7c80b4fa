"""Start a background re-embed with the offline embedder and exit normally while it
runs (argv: database path, seconds to wait after the first batch)."""

import sys
import time

from fastaiagent.facts.index.reembed import reembed_in_background
from fastaiagent.kb.embedding import LocalEmbedder
from fastaiagent.learn import MemoryStore

store = MemoryStore(sys.argv[1])
job = reembed_in_background(store.vector_store(384), LocalEmbedder(), "user:a")
while job.done == 0 and job.state in ("pending", "running"):
    time.sleep(0.005)
time.sleep(float(sys.argv[2]))
print(job.state, job.done, flush=True)
