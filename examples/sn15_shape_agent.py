"""An agent in the shape of SN15's reference agent (ORO-AI/oro, src/agent/agent.py), written for this project.

Like that agent it imports SN15's sandbox API (`src.agent.agent_interface`, `src.agent.proxy_client`), which the
validator's sandbox provides, finds the proxy through $SANDBOX_PROXY_URL, registers its tools with `@Tool`, calls the
model on the proxy's /inference/chat/completions route, and returns SN15 dialogue steps. Its loop is short: the model
names the search keywords, the agent searches, reads the top results and recommends the one that shares most words
with the request. Run it with `shopdistill arena run-agent examples/sn15_shape_agent.py`.
"""
import logging
import re
from os import getenv
from typing import Dict, List
from urllib.parse import quote_plus

from src.agent.agent_interface import Tool, create_dialogue_step, execute_tool_call
from src.agent.proxy_client import ProxyClient

logging.basicConfig(level=logging.INFO)
logger = logging.getLogger(__name__)

MAX_CANDIDATES = 3
_proxy = None


def proxy() -> ProxyClient:
    global _proxy
    if _proxy is None: _proxy = ProxyClient(timeout=60, max_retries=1)
    return _proxy


@Tool
def find_product(q: str, page: int = 1) -> List[Dict]:
    "Search the catalog; up to 10 products a page."
    return proxy().get("/search/find_product", {"q": quote_plus(q), "page": page}) or []


@Tool
def view_product_information(product_ids: str) -> List[Dict]:
    "Descriptions and attributes of comma-separated product ids."
    return proxy().get("/search/view_product_information", {"product_ids": product_ids}) or []


@Tool
def recommend_product(product_ids: str) -> str:
    return f"Having recommended the products to the user: {product_ids}."


@Tool
def terminate(status: str = "success") -> str:
    return f"The interaction has been completed with status: {status}"


def inference(model: str, messages: List[Dict[str, str]]) -> str:
    result = proxy().post("/inference/chat/completions", {"model": model, "messages": messages, "temperature": 0.0, "stream": False})
    try: return result["choices"][0]["message"]["content"] or ""
    except (TypeError, KeyError, IndexError): return ""


def _words(text: str) -> set:
    return set(re.findall(r"[a-z0-9]+", str(text).lower()))


def agent_main(problem_data: Dict) -> List[Dict]:
    query = problem_data.get("query", "")
    model = getenv("SANDBOX_MODEL", "sandbox-default")
    keywords = inference(model, [{"role": "system", "content": "Answer with search keywords only."},
                                 {"role": "user", "content": query}]).strip() or query
    steps = []
    found = execute_tool_call("find_product", {"q": keywords})
    steps.append(create_dialogue_step(f"The model suggests searching for '{keywords}'.", [found], "", query, 1))
    results = [r for r in found["result"] if isinstance(r, dict)][:MAX_CANDIDATES]
    if not results:
        steps.append(create_dialogue_step("Nothing matched; stopping.", [execute_tool_call("terminate", {"status": "failure"})], "", query, 2))
        return steps
    ids = ",".join(str(r["product_id"]) for r in results)
    info = execute_tool_call("view_product_information", {"product_ids": ids})
    want = _words(query)
    scored = sorted(results, key=lambda r: -len(want & _words(r.get("title", ""))))
    best, other = scored[0], scored[1] if len(scored) > 1 else None
    why = (f"Product {best['product_id']} ('{best.get('title', '')[:60]}', {best.get('price')}) shares "
           f"{len(want & _words(best.get('title', '')))} words with the request"
           + (f", more than {other['product_id']} with {len(want & _words(other.get('title', '')))}, so it is the better match." if other else "."))
    steps.append(create_dialogue_step(f"Reading the top {len(results)} results.", [info], "", query, 2))
    rec = execute_tool_call("recommend_product", {"product_ids": str(best["product_id"])})
    steps.append(create_dialogue_step(why, [rec, execute_tool_call("terminate", {"status": "success"})], f"I recommend {best['product_id']}.", query, 3))
    logger.info("recommended %s", best["product_id"])
    return steps
