"""taskloom: a Python runtime for tool-using LLM agents."""

from __future__ import annotations

from .errors import ConfigurationError, ProviderError, TaskloomError
from .messages import Message, Usage

__all__ = ["ConfigurationError", "Message", "ProviderError", "TaskloomError", "Usage"]
__version__ = "0.1.0"
