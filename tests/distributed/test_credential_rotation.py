#!/usr/bin/env python3
"""NATS credentials rotated, and refused, without a restart (issue #21,
section 4): real nats-server, kvindex-agent and kvindex-routers on loopback,
compared with the embedded reference router fed the same engines. Every wait
bounded; every process stopped by its pid.

rotation: the password file is rewritten (the Secret first), then the
  server's config is reloaded with the new password (SIGHUP). The server
  drops the connections, the old password is refused, and agent and routers
  dial anew with the file read again: nobody exits, events published after
  the rotation are indexed, the routers equal the reference.
refused_start: the server was rotated first; agent and router start with
  the old password. Both stay up, count the refusals
  (kvindex_nats_auth_failures_total, kvindex_nats_auth_failing = 1) and
  answer /readyz 503 while the engines keep publishing (the agent buffers).
  Once the files hold the new password both recover by themselves and the
  routers equal the reference exactly (nothing buffered was lost).

Usage: test_credential_rotation.py BIN_DIR SCENARIO
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
import test_distributed as td  # noqa: E402
from nats_e2e import e2e  # noqa: E402


def config(password):
    return 'authorization { user: kv, password: "%s" }\n' % password


def write(path, text):
    with open(path, "w") as f:
        f.write(text + "\n")


def metric(text, name):
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def cluster(bin_dir, server, password_file):
    auth = ["--nats-user", "kv", "--nats-password-file", password_file]
    c = td.Cluster(bin_dir, [server], agent_extra=auth, router_extra=auth, routers=2)
    c.servers = []  # the server is cleaned up by the scenario
    return c


def assert_running(c):
    for p in [c.agent] + c.routers:
        assert p.proc.poll() is None, "%s exited %s:\n%s" % (p.args[0], p.proc.returncode,
                                                           p.logs()[-3000:])


def assert_no_secret(c, *secrets):
    for p in [c.agent] + c.routers:
        logs = p.logs()
        assert not any(secret in logs for secret in secrets), "a password in the logs"


def settle(c):
    try:
        return c.settle()
    except AssertionError:
        print("agent:\n%s\nrouter:\n%s" % (c.agent.logs()[-4000:], c.routers[0].logs()[-4000:]))
        raise


def scenario_rotation(bin_dir):
    one, two = "pw-one-%d" % os.getpid(), "pw-two-%d" % os.getpid()
    server = ne.NatsServer(config=config(one), reloadable=True).start()
    secret = os.path.join(server.dir, "password")
    write(secret, one)
    c = cluster(bin_dir, server, secret)
    try:
        c.start()
        c.drive(100)
        settle(c)
        write(secret, two)  # the Secret first
        server.reload(config(two))  # then the server
        e2e.wait_for(lambda: all(r.metric("kvindex_nats_redials_total") >= 1 for r in c.routers) and
                     metric(c.agent_metrics(), "kvindex_nats_redials_total") >= 1,
                     30, "agent and routers dialled anew with the new password")
        c.drive(200)
        settle(c)
        c.check_matches()
        assert_running(c)
        for r in c.routers:
            assert r.metric("kvindex_nats_auth_failing") == 0
            r.wait_ready(30)
        e2e.wait_for(c.agent_ready, 30, "agent /readyz")
        assert_no_secret(c, one, two)
        print("rotation: password rotated file-first with a server reload; nobody restarted, "
              "routers equal the reference")
    finally:
        c.cleanup()
        server.cleanup()


def scenario_refused_start(bin_dir):
    old, new = "pw-old-%d" % os.getpid(), "pw-new-%d" % os.getpid()
    server = ne.NatsServer(config=config(new), reloadable=True).start()  # rotated first
    secret = os.path.join(server.dir, "password")
    write(secret, old)
    c = cluster(bin_dir, server, secret)
    try:
        for r in c.routers:
            r.start()
        c.agent.start()
        c.reference.start()
        c.reference.wait_ready(30)

        def refused():
            assert_running(c)
            text = c.agent_metrics()
            return (metric(text, "kvindex_nats_auth_failing") == 1 and
                    metric(text, "kvindex_nats_auth_failures_total") >= 2 and
                    all(r.metric("kvindex_nats_auth_failing") == 1 and
                        r.metric("kvindex_nats_auth_failures_total") >= 2 for r in c.routers))
        e2e.wait_for(refused, 30, "agent and routers refused, counted, still running")
        # The engines keep publishing while NATS refuses: the agent buffers.
        c.drive(200)
        time.sleep(1)
        assert_running(c)
        for r in c.routers:
            status, _, body = r.request("GET", "/readyz")
            assert status == 503 and "credentials" in body, (status, body)
        assert not c.agent_ready(), "the agent said ready while NATS refused it"

        write(secret, new)
        try:
            for r in c.routers:
                r.wait_ready(60)
        except AssertionError:
            print("router:\n%s\n/readyz: %s" % (c.routers[0].logs()[-4000:],
                                                 c.routers[0].request("GET", "/readyz")))
            raise
        e2e.wait_for(c.agent_ready, 30, "agent /readyz after the file was fixed")
        settle(c)
        c.check_matches()
        assert_running(c)
        assert_no_secret(c, old, new)
        print("refused_start: agent and routers stayed up and not ready while refused; "
              "after the fix they equal the reference exactly")
    finally:
        c.cleanup()
        server.cleanup()


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
