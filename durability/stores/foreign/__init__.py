"""Stores other tools wrote, read in place: fastaiagent's and LangGraph's.

``base`` holds what every foreign store shares (read-only engines, the refusals, the mapped
rows); ``fastaiagent`` and ``langgraph`` read one tool's layout each, and ``langgraph_map``
maps a LangGraph checkpoint onto the durability model (the LangGraph saver uses it too).
"""

from __future__ import annotations

from durability.stores.foreign.base import ForeignStore, parse_time

__all__ = ["ForeignStore", "parse_time"]
