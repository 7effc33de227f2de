"""The synchronous agent: an OpenAI-compatible LLM client and the ReAct loop around it.

Nothing here imports asyncio: the gateway runs `AIAgent.run_conversation` on a worker thread.
"""

from agent_core.agent import AIAgent, RunResult
from agent_core.control import RunControl
from agent_core.llm import LLMClient, LLMSettings, ModelError

__all__ = ["AIAgent", "LLMClient", "LLMSettings", "ModelError", "RunControl", "RunResult"]
