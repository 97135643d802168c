"Looks for a way out beyond the proxy: DNS, the internet (TCP and UDP), every port of loopback, an abstract Unix socket; then uses the proxy, which must work."

import json, os

imp = __builtins__["__import__"] if isinstance(__builtins__, dict) else __builtins__.__import__
socket = imp("socket")


def agent_main(problem):
    r = {}
    try:
        r["dns"] = str(socket.getaddrinfo("example.com", 80)[:1])
    except OSError as e:
        r["dns"] = type(e).__name__
    for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("10.0.0.1", 80)]:
        try:
            socket.create_connection((host, port), timeout=2).close()
            r[f"{host}:{port}"] = "connected"
        except OSError as e:
            r[f"{host}:{port}"] = type(e).__name__
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
        r["udp"] = "sent"
    except OSError as e:
        r["udp"] = type(e).__name__
    relay = int(os.environ["SANDBOX_PROXY_URL"].rsplit(":", 1)[1])
    open_ports = []
    for port in range(1, 65536):
        if port == relay:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername():
            open_ports.append(port)  # not a self-connect
        s.close()
    r["loopback ports open"] = open_ports
    try:
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.connect("\0shopdistill-hostile-canary")
        r["abstract canary"] = "connected"
    except OSError as e:
        r["abstract canary"] = type(e).__name__
    from shopdistill.arena.tool_client import current_client

    r["proxy results"] = len(current_client().find_product("shirt"))
    return [
        {
            "think": json.dumps(r),
            "tool_call": [{"name": "terminate", "parameters": {"status": "failure"}, "result": ""}],
        }
    ]
