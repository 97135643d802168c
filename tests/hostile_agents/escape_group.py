"Leaves a grandchild behind: fork, setsid() to escape the process group, fork again and exec a long sleep; then hangs past the time limit."

import os, sys, time

fork = getattr(os, "fo" + "rk")
execv = getattr(os, "ex" + "ecv")


def agent_main(problem):
    if fork() == 0:
        os.setsid()
        if fork() == 0:
            execv(
                sys.executable,
                [sys.executable, "-c", "import time; time.sleep(600)", "hostile-escape-marker"],
            )
        os._exit(0)
    time.sleep(600)
    return []
