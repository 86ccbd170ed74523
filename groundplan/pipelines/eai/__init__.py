"""Scoring stored LLM outputs on EAI's action sequencing (``groundplan eai score``)."""
