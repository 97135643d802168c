"Spins on the CPU forever."


def agent_main(problem):
    n = 0
    while True:
        n += 1
