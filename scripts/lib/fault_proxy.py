#!/usr/bin/env python3
"""Loopback TCP fault-injection proxy, placed between a service and its PostgreSQL server.

  fault_proxy.py --listen PORT --target PORT --control PORT    run the proxy (PORT 0: pick a free one;
                                                               prints "listen=N control=N" once listening)
  fault_proxy.py --control-port N COMMAND [ARG]                send one control command, print the answer

Control protocol (one line in, one line "ok <mode>" / "error <why>" out, then close):
  forward       pipe every connection both ways to the target
  blackhole     forward nothing on any connection and close nothing; "forward" releases held data in order
  reset         RST every existing connection; new connections are RST at once
  vanish        existing and new connections go silent for good (no byte, FIN or RST until exit): a dead host
  retarget PORT new connections go to 127.0.0.1:PORT; existing ones are RST (failover); the mode is unchanged
  status        "ok <mode> target=<port> open=<client connections open> silent=<held silent for good>"
Loopback only: everything binds or connects to 127.0.0.1. Python 3 standard library only.
"""
import argparse
import asyncio
import datetime
import signal
import socket
import struct
import sys

HOST = "127.0.0.1"
MODES = ("forward", "blackhole", "reset", "vanish")
CHUNK = 65536


def log(msg):
    stamp = datetime.datetime.now().isoformat(timespec="milliseconds")
    print(f"{stamp} fault_proxy: {msg}", file=sys.stderr, flush=True)


def nodelay(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def rst(writer):
    """Closes so that the peer sees RST rather than FIN (SO_LINGER 0 makes close() abortive)."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already gone
    writer.transport.abort()


class Conn:
    """One client connection and, once forwarding has been allowed, its upstream connection."""

    def __init__(self, proxy, cr, cw):
        self.proxy, self.cr, self.cw = proxy, cr, cw
        self.ur = self.uw = None
        self.silent = self.closed = False
        self.tasks = []  # our own tasks, cancelled on reset/vanish

    def _cancel(self):
        me = asyncio.current_task()
        for t in self.tasks:
            if t is not me:
                t.cancel()

    def reset(self):
        self.closed = True
        self._cancel()
        rst(self.cw)
        rst(self.uw)
        self.proxy.conns.discard(self)

    def vanish(self):
        # The server side is torn down (a dead host takes its backends with it), but the client socket is
        # kept referenced, never written and never closed, until the proxy exits.
        self.silent = True
        self._cancel()
        rst(self.uw)
        self.proxy.silent.append(self)
        self.tasks = [asyncio.create_task(self._discard(self.tasks))]

    async def _discard(self, old_tasks):
        # Reads only to notice the client leaving (for "open"); the kernel stays quiet on EOF since the
        # stream protocol keeps the transport open, so no FIN is sent back.
        await asyncio.gather(*old_tasks, return_exceptions=True)  # a StreamReader allows one reader at a time
        try:
            while await self.cr.read(CHUNK):
                pass
        except OSError:
            pass
        self.proxy.conns.discard(self)

    async def run(self):
        p = self.proxy
        await p.gate()  # blackholed new connections do not even reach the target yet
        try:
            self.ur, self.uw = await asyncio.open_connection(HOST, p.target)
        except OSError:
            self.reset()  # an unreachable target looks like a refused connection
            return
        if self.closed:  # reset or retargeted while connecting
            rst(self.uw)
            return
        nodelay(self.uw)
        pumps = [asyncio.create_task(self.pump(self.cr, self.uw)), asyncio.create_task(self.pump(self.ur, self.cw))]
        self.tasks += pumps
        await asyncio.gather(*pumps, return_exceptions=True)
        if not self.closed and not self.silent:
            self.cw.close()
            self.uw.close()
            p.conns.discard(self)

    async def pump(self, reader, writer):
        try:
            while True:
                data = await reader.read(CHUNK)
                # While blackholed we stop here holding one chunk; the rest waits in the StreamReader and
                # kernel buffers (bounded, with back-pressure), so order is kept and nothing is lost.
                await self.proxy.gate()
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()  # pass half-close on
                    return
                writer.write(data)
                await writer.drain()
        except OSError:
            self.reset()  # an abrupt failure on one side is passed on as RST to both


class Proxy:
    def __init__(self, target):
        self.mode, self.target = "forward", target
        self.conns = set()  # client connections still open (silent ones included until their client leaves)
        self.silent = []  # silenced for good; referenced so they are never garbage-collected (closed)
        self.fwd = asyncio.Event()
        self.fwd.set()

    async def gate(self):
        while not self.fwd.is_set():
            await self.fwd.wait()

    async def on_client(self, cr, cw):
        nodelay(cw)
        c = Conn(self, cr, cw)
        self.conns.add(c)
        if self.mode == "reset":
            c.reset()
        elif self.mode == "vanish":
            c.vanish()
        else:
            # Our own task, not the start_server one: its done-callback would close the transport when
            # cancelled, which a silent connection must never do.
            c.tasks.append(asyncio.create_task(c.run()))

    def set_mode(self, mode):
        log(f"mode {self.mode} -> {mode} (target {self.target})")
        self.mode = mode
        if mode == "forward":
            self.fwd.set()
        else:
            self.fwd.clear()
        if mode in ("reset", "vanish"):
            for c in [c for c in self.conns if not c.silent]:
                if mode == "reset":
                    c.reset()
                else:
                    c.vanish()

    def command(self, words):
        if not words:
            return "error unknown command"
        cmd, args = words[0].lower(), words[1:]
        if cmd == "retarget":
            if len(args) != 1 or not args[0].isdigit() or not 0 < int(args[0]) < 65536:
                return "error usage: retarget PORT"
            log(f"retarget {self.target} -> {args[0]} (mode {self.mode})")
            self.target = int(args[0])
            for c in [c for c in self.conns if not c.silent]:
                c.reset()
            return f"ok {self.mode}"
        if cmd not in MODES and cmd != "status":
            return "error unknown command"
        if args:
            return f"error {cmd} takes no argument"
        if cmd == "status":
            return f"ok {self.mode} target={self.target} open={len(self.conns)} silent={len(self.silent)}"
        self.set_mode(cmd)
        return f"ok {self.mode}"

    async def on_control(self, reader, writer):
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            answer = self.command(line.decode("utf-8", "replace").split())
            writer.write(answer.encode() + b"\n")
            await writer.drain()
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()


async def serve(args):
    proxy = Proxy(args.target)
    data = await asyncio.start_server(proxy.on_client, HOST, args.listen)
    ctl = await asyncio.start_server(proxy.on_control, HOST, args.control)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ports = [s.sockets[0].getsockname()[1] for s in (data, ctl)]
    print(f"listen={ports[0]} control={ports[1]}", flush=True)
    log(f"listening on {HOST}:{ports[0]} -> {HOST}:{args.target}, control {HOST}:{ports[1]}, mode forward")
    await stop.wait()
    data.close()
    ctl.close()
    for c in list(proxy.conns) + proxy.silent:
        for w in (c.cw, c.uw):
            if w is not None:
                w.transport.abort()
    log("stopped")
    return 0


def control(port, words):
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall((" ".join(words) + "\n").encode())
        answer = s.makefile("r", encoding="utf-8", errors="replace").readline().strip()
    print(answer or "error no answer")
    return 0 if answer.startswith("ok") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--listen", type=int, help="port the service connects to (0: pick one)")
    ap.add_argument("--target", type=int, help="port of the PostgreSQL server on 127.0.0.1")
    ap.add_argument("--control", type=int, help="control port (0: pick one)")
    ap.add_argument("--control-port", type=int, help="helper mode: send COMMAND [ARG] to this control port")
    ap.add_argument("command", nargs="*", help="helper mode: forward|blackhole|reset|vanish|retarget PORT|status")
    a = ap.parse_args()
    if a.control_port is not None:
        if not a.command:
            ap.error("COMMAND is required with --control-port")
        try:
            return control(a.control_port, a.command)
        except OSError as e:
            print(f"error {e}")
            return 1
    if a.listen is None or a.target is None or a.control is None or a.command:
        ap.error("the proxy needs --listen, --target and --control (and no COMMAND)")
    return asyncio.run(serve(a))


if __name__ == "__main__":
    sys.exit(main())
