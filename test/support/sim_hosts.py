"""Simulated hosts on one machine: each "host" is a set of rank processes in their own mount and
UTS namespaces, with a private tmpfs on /dev/shm and their own hostname. The ranks of one host share
that /dev/shm; no rank can open another host's shared memory, as on two machines. The TCP store of
the job listens on 127.0.0.1, which every namespace shares (the network namespace is not split).

    from sim_hosts import unshare_unavailable, run_hosts
    results = run_hosts("test_hosts_cpu:all_ops", [[0, 1], [2, 3]], args={...})

run_hosts starts one launcher process per host (`python sim_hosts.py --host ...`, which imports no
torch, so it is single-threaded when it calls unshare(2)); the launcher enters new mount and UTS
namespaces, makes every mount private, mounts a tmpfs on /dev/shm, sets the hostname and starts its
ranks (`python sim_hosts.py --rank ...`). Each rank sets the usual torch.distributed environment
(MASTER_ADDR=127.0.0.1, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), imports
`module:function` and calls it with (rank, world, args); the function returns a JSON-able value.
The launcher writes, for each of its ranks, {"ok", "value" or "error"} plus what was left in its
/dev/shm once all of them exited. Needs root (CAP_SYS_ADMIN); unshare_unavailable() says why not.
"""
import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
HERE = os.path.dirname(os.path.abspath(__file__))


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def enter_host(hostname, shm_bytes=256 << 20):
    """Moves this (single-threaded) process into new mount + UTS namespaces with a private /dev/shm,
    the hostname `hostname`, and a private /etc/hosts where that name is 127.0.0.1 (as a host's own
    name resolves to one of its addresses; gloo looks it up)."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare(CLONE_NEWNS | CLONE_NEWUTS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, f"size={shm_bytes}".encode()), "mount tmpfs on /dev/shm")
    hosts = "/dev/shm/.etc_hosts"  # on the new tmpfs: gone with the namespace
    with open(hosts, "w") as f:
        f.write(f"127.0.0.1 localhost {hostname}\n")
    _check(libc.mount(hosts.encode(), b"/etc/hosts", None, MS_BIND, None), "bind-mount /etc/hosts")
    os.unlink(hosts)  # the bind mount keeps the file; /dev/shm stays empty for the checks
    socket.sethostname(hostname)


def unshare_unavailable():
    """None if simulated hosts can be made here, else why not (for a skip message)."""
    if not sys.platform.startswith("linux"):
        return "simulated hosts need Linux namespaces"
    code = f"import sys; sys.path.insert(0, {HERE!r}); import sim_hosts; sim_hosts.enter_host('purlin-probe-host')"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except Exception as e:  # pragma: no cover
        return f"could not start a probe process: {e}"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return f"unshare/mount not permitted here (needs root or CAP_SYS_ADMIN): {last}"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_hosts(target, hosts, args=None, timeout=120, env=None, shm_bytes=256 << 20):
    """Runs `target` ("module:function", importable from test/ or the caller's sys.path) on every rank of `hosts`
    (a list, one list of global ranks per simulated host), each host with a /dev/shm of `shm_bytes`. Returns
    [per rank: {"ok": bool,
    "value" or "error", "host": name}] and raises AssertionError naming the host and rank that
    failed, timed out or left files in its /dev/shm."""
    world = sum(len(h) for h in hosts)
    assert sorted(r for h in hosts for r in h) == list(range(world)), hosts
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="purlin_hosts_") as tmp:
        # The ranks import what the caller imports: its sys.path, made absolute.
        spec = {"target": target, "args": args or {}, "world": world, "port": port, "hosts": hosts, "shm_bytes": shm_bytes,
                "env": env or {}, "sys_path": [HERE] + [os.path.abspath(p or ".") for p in sys.path]}
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        procs = []
        for h in range(len(hosts)):
            out = os.path.join(tmp, f"host{h}.json")
            # Its own process group (setsid) per launcher: a timeout kills it with its ranks.
            procs.append((h, out, subprocess.Popen([sys.executable, os.path.join(HERE, "sim_hosts.py"), "--host",
                                                    str(h), spec_path, out], start_new_session=True)))
        deadline = time.monotonic() + timeout
        for h, _, p in procs:
            try:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for _, _, q in procs:
                    try:
                        os.killpg(q.pid, 9)
                    except ProcessLookupError:
                        pass
                raise AssertionError(f"simulated host {h} did not finish within {timeout} s")
        results = [None] * world
        problems = []
        for h, out, p in procs:
            if not os.path.exists(out):
                problems.append(f"host {h}: launcher exited with {p.returncode} and no report")
                continue
            with open(out) as f:
                rep = json.load(f)
            if rep.get("error"):
                problems.append(f"host {h}: {rep['error']}")
            if rep.get("shm_left"):
                problems.append(f"host {h}: left in its /dev/shm: {rep['shm_left']}")
            for r, res in rep.get("ranks", {}).items():
                results[int(r)] = res
        for r, res in enumerate(results):
            if res is None:
                problems.append(f"rank {r}: no result")
            elif not res["ok"]:
                problems.append(f"rank {r} (host {res['host']}): {res['error']}")
        if problems:
            raise AssertionError("simulated hosts failed:\n" + "\n".join(problems))
        return results


def _host_main(h, spec_path, out):
    with open(spec_path) as f:
        spec = json.load(f)
    ranks = spec["hosts"][h]
    name = f"simhost{h}"
    report = {"ranks": {}, "error": None, "shm_left": []}
    try:
        enter_host(name, spec["shm_bytes"])
        procs = []
        for local, r in enumerate(ranks):
            res = os.path.join(os.path.dirname(spec_path), f"rank{r}.json")
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec["port"]), RANK=str(r),
                       WORLD_SIZE=str(spec["world"]), LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(len(ranks)),
                       OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", **spec["env"])
            procs.append((r, res, subprocess.Popen([sys.executable, os.path.join(HERE, "sim_hosts.py"), "--rank",
                                                    spec_path, res], env=env)))
        for r, res, p in procs:
            p.wait()
            if os.path.exists(res):
                with open(res) as f:
                    report["ranks"][str(r)] = dict(json.load(f), host=name)
            else:
                report["ranks"][str(r)] = {"ok": False, "host": name, "error": f"exited with {p.returncode}"}
        report["shm_left"] = sorted(os.listdir("/dev/shm"))
    except Exception:
        report["error"] = traceback.format_exc()
    with open(out, "w") as f:
        json.dump(report, f)


def _rank_main(spec_path, out):
    with open(spec_path) as f:
        spec = json.load(f)
    rank = int(os.environ["RANK"])
    try:
        sys.path[:0] = [p for p in spec["sys_path"] if p not in sys.path]
        mod, fn = spec["target"].split(":")
        module = __import__(mod)
        value = getattr(module, fn)(rank, spec["world"], spec["args"])
        res = {"ok": True, "value": value}
    except BaseException:
        res = {"ok": False, "error": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(res, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the interpreter's teardown with torch loaded (seconds per process on 2 cores)


if __name__ == "__main__":
    if sys.argv[1] == "--host":
        _host_main(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        _rank_main(sys.argv[2], sys.argv[3])
