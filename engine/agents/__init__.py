"""Agents propose attempts: the built-in search over kernel families, or a coding-agent CLI."""

from .base import Agent, AgentContext, AttemptView, MemberView, Plan, TurnResult, make_agent

__all__ = ["Agent", "AgentContext", "AttemptView", "MemberView", "Plan", "TurnResult", "make_agent"]
