"""Recall: the query read once, candidates from the stores, one ranking; and the
things people talk about (:mod:`fastaiagent.recall.entities`)."""
