#!/usr/bin/env python3
"""Print N distinct free loopback ports, one per line, for servers a test starts.

They are chosen below the kernel's ephemeral range (ip_local_port_range), so no
outgoing connection on the machine is ever handed one: a server stopped and
started again on its port finds it free. Usage: free-ports.py [N]
"""
import os
import random
import socket
import sys


def free_ports(n=1):
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except OSError:
        pass
    high = max(10000 + 1000, low)
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    held, ports = [], []
    try:
        for _ in range(10000):
            if len(ports) == n:
                break
            port = rng.randrange(10000, high)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    if len(ports) < n:
        raise RuntimeError(f"no {n} free ports below {high}")
    return ports


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and not sys.argv[1].isdigit()):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    print("\n".join(map(str, free_ports(int(sys.argv[1]) if len(sys.argv) == 2 else 1))))
