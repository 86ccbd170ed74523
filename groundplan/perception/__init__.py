"""Perception for grounding feedback: object lists, success detection and scene descriptions
(Inner Monologue, App. A.1). Pure functions over simulator state; no simulator import."""
