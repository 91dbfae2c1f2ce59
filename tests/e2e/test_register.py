#!/usr/bin/env python3
"""Mooncake's POST /register and /unregister (RFC #1403, docs/compat.md) on a
real `kvindex-router --embedded` with no --source: real ZMQ engines
(kvindex_e2e.Engine: vLLM wire batches, replay socket) are registered over
HTTP, behind the API token. Their events show up in /v1/match and in
Mooncake's /query; GET /workers lists them; re-registering is idempotent;
other fields under a taken instance are refused; the number is bounded
(--max-registrations); hostile bodies get a 4xx with a counted reason;
/unregister stops following and clears the entries; and the registrations
survive a restart (DATA_DIR/registrations.json), also one that cannot start
then (kept, pending, started once it can).

Usage: test_register.py BIN_DIR
"""

import json
import os
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402

B = 4
MODEL = "m"
TOKENS = list(range(1, 13))  # 3 full blocks
S = e2e.canonical(TOKENS, B)
TOKEN = "register-test-token"


def registration(engine, instance, model=MODEL, block_size=B, **extra):
    body = {"endpoint": "tcp://127.0.0.1:%d" % engine.pub_port,
            "replay_endpoint": "tcp://127.0.0.1:%d" % engine.replay_port,
            "type": "vLLM", "modelname": model, "lora_name": "", "tenant_id": "default",
            "instance_id": instance, "block_size": block_size, "dp_rank": engine.dp_rank,
            "additionalsalt": ""}
    body.update(extra)
    return body


def outcome_count(router, api, outcome):
    _, _, text = router.request("GET", "/metrics")
    prefix = 'kvindex_router_compat_requests_total{api="%s",outcome="%s"} ' % (api, outcome)
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return 0.0


def rows_of(router, worker):
    # The model is unknown (404) until the engine's first event is applied.
    status, _, text = router.request("POST", "/v1/match",
                                     json.dumps({"model": MODEL, "tokens": TOKENS}))
    if status == 404 and "unknown model" in text:
        return []
    assert status == 200, "POST /v1/match: %d %s" % (status, text)
    return [w for w in json.loads(text)["workers"] if w["worker"] == worker]


def wait_rows(router, worker, longest, engine):
    def held():
        rows = rows_of(router, worker)
        return rows if rows and rows[0]["longest"] == longest else None
    return e2e.wait_for(held, 20, "%s holding %d blocks" % (worker, longest),
                        on_retry=engine.nudge)


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    a = e2e.Engine(ctx, dp_rank=0)
    b = e2e.Engine(ctx, dp_rank=1)
    c = e2e.Engine(ctx, dp_rank=0)
    router = None
    try:
        # Published before registration: the replay buffer has it.
        a.publish([a.stored([11, 12, 13], TOKENS, B)])
        b.publish([b.stored([21, 22], TOKENS[:8], B, medium="CPU")])
        router = e2e.Router(bin_dir, [], ["--max-registrations", "2"],
                            env={"KVINDEX_AUTH_TOKEN": TOKEN}).start()
        router.token = TOKEN
        router.wait_ready()

        # Authorized: without the token, 401 and nothing registered.
        status, _, body = router.request("POST", "/register", registration(a, "inst-a"),
                                         token="")
        assert status == 401, (status, body)
        assert router.json("GET", "/workers") == [], "registered without the token"

        # Registered: the engine is followed (its replayed batch, then live ones).
        got = router.json("POST", "/register", registration(a, "inst-a"), expect=201)
        assert got == {"status": "registered successfully", "instance_id": "inst-a"}, got
        rows = wait_rows(router, "inst-a", 3, a)
        assert rows[0]["device"] == 3 and rows[0]["dp_rank"] == 0, rows
        a.publish([a.stored([14], [13, 14, 15, 16], B, parent=13)])
        # Idempotent: the same fields again answer 200, one registration.
        got = router.json("POST", "/register", registration(a, "inst-a"), expect=200)
        assert got["status"] == "already registered", got
        # Other fields under a taken (instance, rank): 409.
        status, _, body = router.request("POST", "/register",
                                         registration(c, "inst-a"))
        assert status == 409 and "registered with other fields" in body, (status, body)
        assert outcome_count(router, "mooncake_register", "registration_conflict") == 1

        # Mooncake /query answers from the same state (tokens, cumulative tiers).
        answer = router.json("POST", "/query", {"model": MODEL, "token_ids": TOKENS,
                                                "tenant_id": "default", "block_size": B})
        assert answer == {"default": {"inst-a": {"longest_matched": 12, "GPU": 12, "CPU": 12,
                                                 "DISK": 12, "DP": {"0": 12}}}}, answer

        # A second engine (rank 1, host tier), then the bound.
        router.json("POST", "/register", registration(b, "inst-b"), expect=201)
        rows = wait_rows(router, "inst-b", 2, b)
        assert rows[0]["host"] == 2 and rows[0]["dp_rank"] == 1, rows
        status, _, body = router.request("POST", "/register", registration(c, "inst-c"))
        assert status == 409 and "--max-registrations 2" in body, (status, body)
        assert outcome_count(router, "mooncake_register", "too_many_registrations") == 1

        def workers_now():
            rows = {w["instance_id"]: w for w in router.json("GET", "/workers")}
            return rows if rows.get("inst-a", {}).get("entries") == 4 else None
        workers = e2e.wait_for(workers_now, 10, "inst-a's 4 entries in /workers")
        assert set(workers) == {"inst-a", "inst-b"}, workers
        wa = workers["inst-a"]
        assert wa["source"] == "register" and wa["type"] == "vLLM" and wa["block_size"] == B, wa
        assert wa["endpoint"] == "tcp://127.0.0.1:%d" % a.pub_port and wa["dp_ranks"] == [0], wa
        assert workers["inst-b"]["dp_ranks"] == [1], workers

        # Hostile bodies: a 4xx each, with its reason counted, nothing registered.
        hostile = [
            ("{", 400, "invalid_request", "invalid JSON"),
            ("[1]", 400, "invalid_request", "JSON object"),
            (registration(c, "x", endpoint=None), 400, "missing_field", "endpoint"),
            ({k: v for k, v in registration(c, "x").items() if k != "block_size"}, 400,
             "missing_field", "block_size"),
            (registration(c, "x", type="Mooncake"), 400, "invalid_request", "Mooncake"),
            (registration(c, "x", type="tgi"), 400, "invalid_request", "vLLM or SGLang"),
            (registration(c, "x", endpoint="ipc:///tmp/kv"), 400, "invalid_request", "tcp://"),
            (registration(c, "x", endpoint="bind:tcp://127.0.0.1:1"), 400, "invalid_request",
             "tcp://"),
            (registration(c, "x,engine=sglang"), 400, "invalid_request", "instance_id"),
            (registration(c, "x", modelname="m" * 2000), 400, "invalid_request", "1024 bytes"),
            (registration(c, "x", block_size=0), 400, "invalid_request", "block_size"),
            (registration(c, "x", block_size=-1), 400, "invalid_request", "block_size"),
            (registration(c, "x", block_size=8), 400, "invalid_request", "one block size"),
            (registration(c, "x", dp_rank=1 << 40), 400, "invalid_request", "dp_rank"),
            # Ranks past kMaxDpRanks (1024): /unregister clears ranks 0..dp_rank.
            (registration(c, "x", dp_rank=1024), 400, "invalid_request", "dp_rank"),
            (registration(c, "x", dp_rank=(1 << 32) - 1), 400, "invalid_request", "dp_rank"),
            (registration(c, "x", instance_id=7), 400, "invalid_request", "instance_id"),
        ]
        for body, status_want, outcome, text in hostile:
            before = outcome_count(router, "mooncake_register", outcome)
            status, _, answer = router.request("POST", "/register", body)
            assert status == status_want and text in answer, (body, status, answer)
            assert "error" in json.loads(answer), answer
            assert outcome_count(router, "mooncake_register", outcome) == before + 1, (
                body, outcome)
        assert {w["instance_id"] for w in router.json("GET", "/workers")} == \
            {"inst-a", "inst-b"}, "a hostile body registered something"

        # Unregistered: no longer followed, its entries cleared.
        got = router.json("POST", "/unregister", {"instance_id": "inst-a", "dp_rank": 0})
        assert got == {"status": "unregistered successfully",
                       "removed_instances": ["inst-a|default|0"]}, got
        e2e.wait_for(lambda: rows_of(router, "inst-a") == [], 10, "inst-a cleared")
        a.publish([a.stored([15], [17, 18, 19, 20], B, parent=14)])
        assert rows_of(router, "inst-a") == [], "followed after /unregister"
        assert "inst-a" not in {w["instance_id"] for w in router.json("GET", "/workers")}
        status, _, body = router.request("POST", "/unregister", {"instance_id": "inst-a"})
        assert status == 404, (status, body)
        assert outcome_count(router, "mooncake_unregister", "not_registered") == 1
        # The freed slot can be used again.
        router.json("POST", "/register", registration(c, "inst-c"), expect=201)
        router.json("POST", "/unregister", {"instance_id": "inst-c"})

        # Restart: inst-b is followed again (from the saved file), inst-a is not.
        saved = json.load(open(os.path.join(router.data_dir, "registrations.json")))
        assert [r["instance_id"] for r in saved["registrations"]] == ["inst-b"], saved
        assert router.stop() == 0
        b.publish([b.stored([23], [9, 10, 11, 12], B, parent=22, medium="CPU")])
        # Hand-edited entries whose integers do not read back as they are
        # (-1 is not 4294967295, a float is not a rank) are skipped.
        tampered = dict(saved["registrations"][0], endpoint="tcp://127.0.0.1:1",
                        replay_endpoint="")
        saved["registrations"] += [dict(tampered, instance_id="neg", dp_rank=-1),
                                   dict(tampered, instance_id="float", dp_rank=1e30),
                                   dict(tampered, instance_id="big", dp_rank=1 << 31)]
        with open(os.path.join(router.data_dir, "registrations.json"), "w") as out:
            json.dump(saved, out)
        router.start()
        router.wait_ready()
        rows = wait_rows(router, "inst-b", 3, b)
        assert rows[0]["host"] == 3, rows
        assert rows_of(router, "inst-a") == [], "inst-a came back"
        assert {w["instance_id"] for w in router.json("GET", "/workers")} == {"inst-b"}

        # A saved registration that cannot start at the next start (here
        # --max-registrations lowered to 1) is not lost: it stays in the
        # file, pending (listed, its old entries cleared, not followed), and
        # starts once it can (a slot freed, tried again every 5 s).
        path = os.path.join(router.data_dir, "registrations.json")
        router.json("POST", "/register", registration(c, "inst-c"), expect=201)
        c.publish([c.stored([31], TOKENS[:4], B)])
        wait_rows(router, "inst-c", 1, c)
        assert router.stop() == 0
        router.args[router.args.index("--max-registrations") + 1] = "1"
        router.start()
        router.wait_ready()
        wait_rows(router, "inst-b", 3, b)
        saved = json.load(open(path))
        assert [r["instance_id"] for r in saved["registrations"]] == ["inst-b", "inst-c"], saved
        assert {w["instance_id"] for w in router.json("GET", "/workers")} == \
            {"inst-b", "inst-c"}
        e2e.wait_for(lambda: rows_of(router, "inst-c") == [], 10, "pending inst-c cleared")
        router.json("POST", "/unregister", {"instance_id": "inst-b"})
        wait_rows(router, "inst-c", 1, c)
        saved = json.load(open(path))
        assert [r["instance_id"] for r in saved["registrations"]] == ["inst-c"], saved

        # A registrations file past its size bound (16 MiB) is not read.
        assert router.stop() == 0
        text = open(path).read()
        with open(path, "w") as out:
            out.write(text + " " * (17 << 20))
        router.start()
        router.wait_ready()
        router.proc.terminate()
        router.proc.wait(timeout=20)
        logs = router.logs()
        assert router.stop() == 0
        assert "bytes, more than 16777216: no registered engine followed" in logs, \
            "an oversized registrations file was read"
        assert os.path.getsize(path) > 17 << 20, "the oversized file was rewritten"
        print("register: 2 engines registered over HTTP, %d hostile bodies refused, "
              "unregister cleared, registrations survived a restart" % len(hostile))
    except AssertionError:
        if router is not None and router.proc is not None:
            router.proc.terminate()
            sys.stderr.write(router.logs())
        raise
    finally:
        if router is not None:
            router.cleanup()
        for engine in (a, b, c):
            engine.close()
        ctx.term()


if __name__ == "__main__":
    main()
