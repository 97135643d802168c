"""The sandbox's reference agent (chapter 01) as an SN15 submission: one file that defines `agent_main(problem)`.

It reaches the catalog only through the provided tool client (`shopdistill.arena.tool_client`), which talks to the
validator's loopback proxy; run it with `shopdistill arena run-agent examples/reference_agent.py`.
"""
from shopdistill.sandbox.reference_agent import ReferenceAgent
from shopdistill.arena.tool_client import episode_env


def agent_main(problem: dict) -> list:
    "Solve one problem ({problem_id, query, category}); returns the steps (thought, tool call, result)."
    env = episode_env(step_cap=25)
    return ReferenceAgent().run(env, problem["query"])
