"""Skill sets, affordance functions and learned grounding models."""
from groundplan.registry import Registry

#: affordance-source factories by name: ``AFFORDANCES.get(name)(**options) -> AffordanceSource``
AFFORDANCES: Registry = Registry("affordance")
