#!/usr/bin/env node
// Tests of the Helm chart helm/kvindex with a real helm (tests/helm/README.md).
//
//   node chart_test.mjs lint
//   node chart_test.mjs render
//   node chart_test.mjs schema
//   node chart_test.mjs check-config ROUTER_BINARY AGENT_BINARY
//   node chart_test.mjs dockerfile
//
// Tools come from fetch-tools.sh (exit 77 = skipped when they cannot be
// fetched outside CI). Exit 0 = passed, 1 = failed.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const chart = path.join(repo, "helm/kvindex");
const valuesDir = path.join(here, "values");
const badValuesDir = path.join(here, "bad-values");
const RELEASE = "kv";
const NAMESPACE = "llm";

const fetched = spawnSync("bash", [path.join(here, "fetch-tools.sh")], {
  encoding: "utf8",
  stdio: ["ignore", "pipe", "inherit"],
});
if (fetched.status === 77) process.exit(77);
if (fetched.status !== 0) {
  console.error(`fetch-tools.sh failed (exit ${fetched.status})`);
  process.exit(1);
}
const cache = fetched.stdout.trim().split("\n").pop();
const requireTool = createRequire(path.join(cache, "node", "package.json"));
const YAML = requireTool("yaml");
const helm = path.join(cache, "bin", "helm");

let failures = 0;
let checks = 0;
function check(condition, message) {
  checks++;
  if (!condition) {
    failures++;
    console.error(`FAIL: ${message}`);
  }
  return condition;
}

function run(command, args, options = {}) {
  return spawnSync(command, args, { encoding: "utf8", maxBuffer: 64 << 20, ...options });
}

// The defaults refuse to render without NATS credentials; the "default" set
// is the defaults plus that one explicit opt-out.
const DEFAULT_ARGS = ["--set", "security.allowInsecureNats=true"];

// Value sets: the defaults plus every file in values/.
function valueSets() {
  const sets = [{ name: "default", args: DEFAULT_ARGS }];
  for (const file of fs.readdirSync(valuesDir).sort()) {
    if (file.endsWith(".yaml")) {
      sets.push({ name: file.replace(/\.yaml$/, ""), args: ["-f", path.join(valuesDir, file)] });
    }
  }
  return sets;
}

function template(args) {
  const result = run(helm, ["template", RELEASE, chart, "--namespace", NAMESPACE, ...args]);
  // helm warns on stderr that dashboards/kvindex.json is a link: expected.
  const stderr = result.stderr
    .split("\n")
    .filter((line) => line && !line.includes("found symbolic link in path"))
    .join("\n");
  return { status: result.status, stdout: result.stdout, stderr };
}

function render(args) {
  const result = template(args);
  if (result.status !== 0) throw new Error(`helm template ${args.join(" ")}: ${result.stderr}`);
  return YAML.parseAllDocuments(result.stdout)
    .map((doc) => {
      if (doc.errors.length) throw new Error(`rendered YAML: ${doc.errors[0].message}`);
      return doc.toJS();
    })
    .filter((obj) => obj !== null);
}

// NOTES.txt as `helm install` prints it. helm renders NOTES only against a
// cluster, so a copy of the chart renders it through `tpl` into a ConfigMap.
let notesChart = null;
function renderNotes(args) {
  if (!notesChart) {
    notesChart = fs.mkdtempSync(path.join(os.tmpdir(), "kvindex-notes-"));
    fs.cpSync(chart, notesChart, { recursive: true, dereference: true });
    fs.mkdirSync(path.join(notesChart, "notes-test"));
    fs.copyFileSync(path.join(chart, "templates/NOTES.txt"), path.join(notesChart, "notes-test/NOTES.txt"));
    fs.writeFileSync(
      path.join(notesChart, "templates/zz-notes-test.yaml"),
      'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-test\ndata:\n  notes: {{ tpl (.Files.Get "notes-test/NOTES.txt") . | quote }}\n',
    );
    process.on("exit", () => fs.rmSync(notesChart, { recursive: true, force: true }));
  }
  const result = run(helm, ["template", RELEASE, notesChart, "--namespace", NAMESPACE, "--show-only", "templates/zz-notes-test.yaml", ...args]);
  if (result.status !== 0) throw new Error(`NOTES.txt: ${result.stderr}`);
  return YAML.parse(result.stdout).data.notes;
}

const find = (objects, kind, suffix = "") =>
  objects.filter((o) => o.kind === kind && o.metadata.name.endsWith(suffix));

// ---------------------------------------------------------------- lint
function lint() {
  for (const set of valueSets()) {
    const result = run(helm, ["lint", "--strict", chart, ...set.args]);
    const ok = check(result.status === 0, `helm lint --strict (${set.name}):\n${result.stdout}${result.stderr}`);
    if (ok) console.log(`lint ${set.name}: ok`);
  }
}

// ---------------------------------------------------------------- render
// The Kubernetes API schema of one object (kubernetes-models: the OpenAPI
// schemas of the API server, compiled).
function schemaClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const module =
    group === "monitoring.coreos.com"
      ? `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`
      : `kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`;
  return requireTool(module)[kind];
}

// The compiled validate function behind a kubernetes-models class.
function schemaValidator(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const module =
    group === "monitoring.coreos.com"
      ? `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`
      : `kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`;
  const file = requireTool.resolve(module);
  const schema = /require\("([^"]*_schemas\/[^"]+)"\)/.exec(fs.readFileSync(file, "utf8"));
  if (!schema) throw new Error(`${module}: no schema module`);
  return createRequire(file)(schema[1]).validate;
}

// A copy of `value` whose objects record which keys are read. A compiled
// schema reads every property it declares (and every key of a map), so a key
// it never read is a field the API does not have: the API server refuses it
// (kubectl's default, --validate=strict), while the schemas alone, without
// additionalProperties: false, would let it pass.
function recording(value, where, objects) {
  if (Array.isArray(value)) return value.map((v, i) => recording(v, `${where}/${i}`, objects));
  if (value && typeof value === "object") {
    const reads = new Set();
    const target = {};
    for (const key of Object.keys(value)) target[key] = recording(value[key], `${where}/${key}`, objects);
    objects.push({ where, keys: Object.keys(value), reads });
    return new Proxy(target, {
      get(t, key, receiver) {
        if (typeof key === "string") reads.add(key);
        return Reflect.get(t, key, receiver);
      },
    });
  }
  return value;
}

// GAIE's InferencePool (inference.networking.k8s.io/v1) has no compiled
// schema in the npm packages: its API's rules, checked by hand (spec fields
// and types from the v1 API; unknown fields refused as strict validation
// would).
function validateInferencePool(obj, where) {
  const name = `${where}: InferencePool/${obj.metadata?.name}`;
  const keys = (o, allowed, at) => {
    const extra = Object.keys(o || {}).filter((k) => !allowed.includes(k));
    return check(extra.length === 0, `${name}: unknown fields at ${at}: ${extra.join(", ")}`);
  };
  const port = (n) => Number.isInteger(n) && n >= 1 && n <= 65535;
  const spec = obj.spec || {};
  keys(obj, ["apiVersion", "kind", "metadata", "spec"], "/");
  keys(spec, ["selector", "targetPorts", "endpointPickerRef"], "/spec");
  const labels = spec.selector?.matchLabels;
  keys(spec.selector, ["matchLabels"], "/spec/selector");
  check(labels && Object.keys(labels).length >= 1 && Object.values(labels).every((v) => typeof v === "string"), `${name}: spec.selector.matchLabels must be a non-empty string map`);
  const ports = spec.targetPorts;
  check(Array.isArray(ports) && ports.length >= 1 && ports.length <= 8 && ports.every((p) => port(p.number) && Object.keys(p).length === 1), `${name}: spec.targetPorts must be 1..8 {number} ports`);
  const ref = spec.endpointPickerRef;
  check(ref && typeof ref.name === "string" && ref.name.length > 0, `${name}: spec.endpointPickerRef.name is required`);
  keys(ref, ["group", "kind", "name", "port", "failureMode"], "/spec/endpointPickerRef");
  check((ref?.kind ?? "Service") !== "Service" || port(ref?.port?.number), `${name}: a Service endpointPickerRef needs port.number`);
  return check(["FailOpen", "FailClose", undefined].includes(ref?.failureMode), `${name}: failureMode must be FailOpen or FailClose`);
}

function validateObject(obj, where) {
  if (obj.apiVersion === "inference.networking.k8s.io/v1" && obj.kind === "InferencePool") {
    return validateInferencePool(obj, where);
  }
  let validate;
  try {
    validate = schemaValidator(obj.apiVersion, obj.kind);
  } catch (e) {
    return check(false, `${where}: no Kubernetes schema for ${obj.apiVersion} ${obj.kind} (${e.message})`);
  }
  const name = `${obj.kind}/${obj.metadata?.name}`;
  const objects = [];
  const valid = validate(recording(obj, "", objects));
  const errors = (validate.errors || []).map((e) => `${e.instancePath || "/"} ${e.message || e.keyword} ${JSON.stringify(e.params)}`);
  check(valid, `${where}: ${name} does not validate: ${errors.join("; ")}`);
  const unknown = objects.flatMap((o) => o.keys.filter((k) => !o.reads.has(k)).map((k) => `${o.where}/${k}`));
  return check(unknown.length === 0, `${where}: ${name} has fields the Kubernetes API does not know: ${unknown.join(", ")}`);
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

// The pods the chart defines: workloads' templates and the sidecar snippet
// pasted into an engine pod.
function podSpecs(objects) {
  const pods = [];
  for (const o of objects) {
    if (o.kind === "StatefulSet" || o.kind === "DaemonSet") {
      pods.push({ name: `${o.kind}/${o.metadata.name}`, owner: o, spec: o.spec.template.spec, labels: o.spec.template.metadata.labels });
    }
    if (o.kind === "ConfigMap" && o.metadata.name.endsWith("-agent-sidecar")) {
      const containers = YAML.parse(o.data["container.yaml"]);
      const volumes = YAML.parse(o.data["volumes.yaml"]);
      const pod = {
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: "engine-0", namespace: NAMESPACE },
        spec: {
          enableServiceLinks: false,
          securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
          containers: [{ name: "engine", image: "vllm/vllm-openai:latest" }, ...containers],
          volumes,
        },
      };
      pods.push({ name: "sidecar snippet in an engine Pod", owner: pod, spec: pod.spec, sidecar: true, snippet: pod });
    }
  }
  return pods;
}

function checkPodSecurity(pod) {
  const spec = pod.spec;
  const podSc = spec.securityContext || {};
  if (!pod.sidecar) {
    check(podSc.runAsNonRoot === true, `${pod.name}: pod securityContext.runAsNonRoot`);
    check(podSc.seccompProfile?.type === "RuntimeDefault", `${pod.name}: pod seccompProfile RuntimeDefault`);
    check(spec.automountServiceAccountToken === false, `${pod.name}: automountServiceAccountToken false`);
    check(spec.enableServiceLinks === false, `${pod.name}: enableServiceLinks false`);
  }
  const volumes = new Map((spec.volumes || []).map((v) => [v.name, v]));
  for (const c of spec.containers) {
    if (!c.name.startsWith("kvindex-")) continue;
    const where = `${pod.name} container ${c.name}`;
    const sc = c.securityContext || {};
    check(sc.runAsNonRoot === true, `${where}: runAsNonRoot`);
    check(sc.readOnlyRootFilesystem === true, `${where}: readOnlyRootFilesystem`);
    check(sc.allowPrivilegeEscalation === false, `${where}: allowPrivilegeEscalation false`);
    check((sc.capabilities?.drop || []).includes("ALL"), `${where}: capabilities drop ALL`);
    check(sc.seccompProfile?.type === "RuntimeDefault", `${where}: seccompProfile RuntimeDefault`);
    check(c.resources?.requests?.cpu && c.resources?.requests?.memory, `${where}: cpu and memory requests`);
    check(c.resources?.limits?.memory, `${where}: memory limit`);
    // HTTP, or (the routers with epp.enabled) grpc.health.v1 with the same states.
    check(c.livenessProbe?.httpGet?.path === "/healthz" || c.livenessProbe?.grpc?.service === "liveness", `${where}: liveness on /healthz or gRPC "liveness"`);
    check(c.readinessProbe?.httpGet?.path === "/readyz" || c.readinessProbe?.grpc?.service === "readiness", `${where}: readiness on /readyz or gRPC "readiness"`);
    const ports = new Set((c.ports || []).map((p) => p.name));
    const numbers = new Set((c.ports || []).map((p) => p.containerPort));
    for (const probe of [c.livenessProbe, c.readinessProbe, c.startupProbe].filter(Boolean)) {
      if (probe.grpc) {
        check(Number.isInteger(probe.grpc.port) && numbers.has(probe.grpc.port), `${where}: gRPC probe port ${probe.grpc.port} is a container port number`);
      } else {
        check(ports.has(probe.httpGet?.port), `${where}: probe port ${probe.httpGet?.port} is a container port`);
      }
    }
    if (c.name === "kvindex-router") {
      const s = c.startupProbe;
      check(s?.httpGet?.path === "/healthz", `${where}: startupProbe on /healthz`);
      check(s && s.periodSeconds * s.failureThreshold >= 300, `${where}: startupProbe allows >= 5 min for a checkpoint load`);
    }
    for (const m of c.volumeMounts || []) {
      const claimed = (pod.owner.spec?.volumeClaimTemplates || []).some((t) => t.metadata.name === m.name);
      check(volumes.has(m.name) || claimed, `${where}: volumeMount ${m.name} has a volume or a volumeClaimTemplate`);
    }
    const env = c.env || [];
    const names = env.map((e) => e.name);
    check(new Set(names).size === names.length, `${where}: duplicate environment variables`);
    for (const e of env) {
      if (e.name.startsWith("KVINDEX_")) {
        const fromSecret = e.name === "KVINDEX_NATS" && e.valueFrom?.secretKeyRef;
        check(e.value !== undefined || fromSecret, `${where}: ${e.name} has a plain value (secrets come from files; only the NATS URL may come from a Secret)`);
        check(!/password|token/i.test(e.name) || /_FILE$/.test(e.name), `${where}: ${e.name} would carry a secret in the pod spec`);
      }
    }
  }
}

function selects(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => labels?.[k] === v);
}

// Per value set: what must (not) be there beyond the common checks.
const expectations = {
  "agents-only"(objects) {
    for (const kind of ["StatefulSet", "PodDisruptionBudget", "HorizontalPodAutoscaler"]) {
      check(find(objects, kind).length === 0, `agents-only: no ${kind}`);
    }
    check(find(objects, "DaemonSet").length === 1, "agents-only: the agent DaemonSet");
    check(find(objects, "ServiceMonitor").length === 1 && find(objects, "NetworkPolicy").length === 1, "agents-only: the agents' ServiceMonitor and NetworkPolicy only");
    check(!objects.some((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard")), "agents-only: no dashboard");
  },
  epp(objects) {
    const sts = find(objects, "StatefulSet")[0];
    const env = envOf(sts, "kvindex-router");
    check(env.KVINDEX_EPP === "0.0.0.0:9002" && env.KVINDEX_EPP_HEALTH === "0.0.0.0:9003", "epp: the routers serve ext_proc on 9002 and health on 9003");
    check(env.KVINDEX_LOAD_MAX_AGE === "2s", "epp: epp.config reaches the router");
    const ports = sts.spec.template.spec.containers[0].ports.map((p) => `${p.name}=${p.containerPort}`);
    check(ports.includes("epp=9002") && ports.includes("epp-health=9003"), `epp: container ports (${ports})`);
    const router = sts.spec.template.spec.containers.find((c) => c.name === "kvindex-router");
    check(router.livenessProbe?.grpc?.port === 9003 && router.livenessProbe.grpc.service === "liveness" && !router.livenessProbe.httpGet, "epp: liveness is the gRPC health check \"liveness\" on 9003");
    check(router.readinessProbe?.grpc?.port === 9003 && router.readinessProbe.grpc.service === "readiness" && !router.readinessProbe.httpGet, "epp: readiness is the gRPC health check \"readiness\" on 9003");
    const svc = find(objects, "Service", "-router-epp")[0];
    const byName = Object.fromEntries((svc?.spec.ports || []).map((p) => [p.name, p]));
    check(byName["grpc-ext-proc"]?.port === 9002 && byName["grpc-ext-proc"].appProtocol === "kubernetes.io/h2c" && byName["grpc-ext-proc"].targetPort === "epp", "epp: the EPP Service's ext_proc port, h2c");
    check(byName["grpc-health"]?.port === 9003 && byName["grpc-health"].targetPort === "epp-health", "epp: the EPP Service's health port");
    check(selects(svc?.spec.selector, sts.spec.template.metadata.labels), "epp: the EPP Service selects the routers");
    const pool = find(objects, "InferencePool")[0];
    check(pool?.spec.endpointPickerRef.name === svc?.metadata.name && pool.spec.endpointPickerRef.port.number === 9002 && pool.spec.endpointPickerRef.failureMode === "FailOpen", "epp: the InferencePool's picker is the EPP Service on 9002, FailOpen");
    check(pool?.spec.selector.matchLabels.app === "vllm-llama" && pool.spec.targetPorts[0].number === 8000, "epp: the pool selects the engines on 8000");
    const policy = find(objects, "NetworkPolicy", "-router")[0];
    const allowed = (policy?.spec.ingress || []).flatMap((r) => r.ports || []).map((p) => p.port);
    check(allowed.includes(9002) && allowed.includes(9003), `epp: the routers' NetworkPolicy admits 9002 and 9003 (${allowed})`);
    const sidecar = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-agent-sidecar"));
    check(/endpoint=\$\(POD_IP\):8000/.test(sidecar?.data["container.yaml"] || ""), "epp: the agents announce endpoint=$(POD_IP):8000");
    check(env.KVINDEX_SGLANG_INDEXER === "0.0.0.0:50051" && env.KVINDEX_SGLANG_MODEL === "M", "epp: the routers serve SGLang's KV indexer on 50051 for model M");
    check(ports.includes("sglang-indexer=50051"), `epp: the SGLang indexer container port (${ports})`);
    const client = find(objects, "Service").find((o) => o.metadata.name.endsWith("-router"));
    const sglang = (client?.spec.ports || []).find((p) => p.name === "sglang-indexer");
    check(sglang?.port === 50051 && sglang.targetPort === "sglang-indexer" && sglang.appProtocol === "kubernetes.io/h2c", "epp: the client Service carries the SGLang indexer port, h2c");
    check(allowed.includes(50051), `epp: the routers' NetworkPolicy admits 50051 (${allowed})`);
  },
  default(objects) {
    check(find(objects, "InferencePool").length === 0 && find(objects, "Service", "-router-epp").length === 0, "default: no endpoint picker objects (epp.enabled=false)");
    const sts = find(objects, "StatefulSet")[0];
    check(envOf(sts, "kvindex-router").KVINDEX_SGLANG_INDEXER === undefined, "default: no SGLang indexer (sglangIndexer.enabled=false)");
    const router = sts?.spec.template.spec.containers.find((c) => c.name === "kvindex-router");
    check(router?.livenessProbe?.httpGet?.path === "/healthz" && router?.readinessProbe?.httpGet?.path === "/readyz", "default: HTTP probes (no EPP health port)");
    check(sts?.spec.replicas === 2, "default: 2 router replicas");
    check(find(objects, "DaemonSet").length === 0, "default: no agent DaemonSet (agent.enabled=false)");
    for (const kind of ["HorizontalPodAutoscaler", "ServiceMonitor"]) {
      check(find(objects, kind).length === 0, `default: no ${kind}`);
    }
    check(find(objects, "PodDisruptionBudget").length === 1, "default: a PodDisruptionBudget");
    const env = envOf(sts, "kvindex-router");
    check(env.KVINDEX_NATS === "nats://nats.nats.svc:4222", "default: external NATS URL");
    // Secure by default (issue #21 section 6): an API token from a generated
    // Secret, and the routers' NetworkPolicy.
    const secret = find(objects, "Secret", "-router-api-token")[0];
    check(secret && Buffer.from(secret.data?.token || "", "base64").toString().length === 48, "default: a generated 48-character API token Secret");
    check(env.KVINDEX_AUTH_TOKEN_FILE === "/etc/kvindex/auth/token", "default: the router reads the API token file");
    const mounted = sts.spec.template.spec.volumes.find((v) => v.name === "kvindex-auth")?.secret?.secretName;
    check(secret && mounted === secret.metadata.name, `default: the router mounts the generated Secret (${mounted})`);
    const policies = find(objects, "NetworkPolicy");
    check(policies.length === 1 && policies[0].metadata.name.endsWith("-router"), "default: the routers' NetworkPolicy");
  },
  "three-replicas"(objects) {
    const sts = find(objects, "StatefulSet")[0];
    check(sts.spec.replicas === 3, "three-replicas: 3 routers");
    check(envOf(sts, "kvindex-router").KVINDEX_MODELS === "meta-llama/Llama-3.1-8B,Qwen/Qwen2.5-7B", "three-replicas: --models");
    const ds = find(objects, "DaemonSet")[0];
    check(ds, "three-replicas: agent DaemonSet");
    const env = envOf(ds, "kvindex-agent");
    check(env.KVINDEX_SOURCE.split(";").length === 2, "three-replicas: two sources joined with ';'");
    check(env.KVINDEX_BUFFER_BYTES === "67108864", `three-replicas: large integers stay integers (${env.KVINDEX_BUFFER_BYTES})`);
  },
  tls(objects) {
    for (const w of [...find(objects, "StatefulSet"), ...find(objects, "DaemonSet")]) {
      const env = envOf(w, w.kind === "StatefulSet" ? "kvindex-router" : "kvindex-agent");
      for (const name of ["KVINDEX_NATS_TLS_CA", "KVINDEX_NATS_TLS_CERT", "KVINDEX_NATS_TLS_KEY", "KVINDEX_NATS_CREDS_FILE"]) {
        check(env[name]?.startsWith("/etc/kvindex/"), `tls: ${w.kind} ${name} is a mounted file`);
      }
      const secrets = w.spec.template.spec.volumes.filter((v) => v.secret).map((v) => v.secret.secretName);
      check(secrets.includes("kvindex-nats-tls") && secrets.includes("kvindex-nats-creds"), `tls: ${w.kind} mounts both Secrets`);
    }
  },
  "auth-token"(objects) {
    const sts = find(objects, "StatefulSet")[0];
    const env = envOf(sts, "kvindex-router");
    check(env.KVINDEX_AUTH_TOKEN_FILE === "/etc/kvindex/auth/token", "auth-token: token file");
    check(env.KVINDEX_METRICS_AUTH === "true", "auth-token: --metrics-auth");
    check(env.KVINDEX_NATS_USER === "kvindex" && env.KVINDEX_NATS_PASSWORD_FILE, "auth-token: NATS user and password file");
    const sm = find(objects, "ServiceMonitor", "-router")[0];
    check(sm?.spec.endpoints[0].authorization?.credentials?.name === "kvindex-api-token", "auth-token: ServiceMonitor scrapes with the token");
    check(find(objects, "Secret").length === 0, "auth-token: no generated Secret beside the given one");
  },
  "router-limits"(objects) {
    const sts = find(objects, "StatefulSet")[0];
    const env = envOf(sts, "kvindex-router");
    const want = {
      KVINDEX_BOOTSTRAP_FROM: "https://kvindex-router.kvindex.svc:8443",
      KVINDEX_BOOTSTRAP_MAX_BYTES: "2147483648",
      KVINDEX_BOOTSTRAP_TIMEOUT: "2m",
      KVINDEX_HTTP_MAX_BODY_TOTAL_BYTES: "33554432",
      KVINDEX_HTTP_MAX_CONNECTIONS_PER_CLIENT: "64",
      KVINDEX_MAX_MODELS: "8",
      KVINDEX_MAX_NODES: "64",
      KVINDEX_BOOTSTRAP_CA: "/etc/kvindex/bootstrap-ca/ca.pem",
    };
    for (const [name, value] of Object.entries(want)) check(env[name] === value, `router-limits: ${name}=${env[name]}, expected ${value}`);
    const pod = sts.spec.template.spec;
    const container = pod.containers.find((c) => c.name === "kvindex-router");
    check(
      JSON.stringify(container.args) ===
        JSON.stringify(["--tokenizer", "meta-llama/Llama-3.1-8B=/etc/kvindex/tokenizers/0", "--tokenizer", "Qwen/Qwen2.5-7B=/etc/kvindex/tokenizers/1"]),
      `router-limits: --tokenizer arguments (${container.args})`,
    );
    const mounts = Object.fromEntries(container.volumeMounts.map((m) => [m.name, m]));
    const volumes = Object.fromEntries(pod.volumes.map((v) => [v.name, v]));
    check(volumes["kvindex-bootstrap-ca"]?.secret?.secretName === "kvindex-bootstrap-ca" && mounts["kvindex-bootstrap-ca"]?.mountPath === "/etc/kvindex/bootstrap-ca", "router-limits: the bootstrap CA Secret mounted");
    check(volumes["kvindex-tokenizer-0"]?.persistentVolumeClaim?.claimName === "llama-tokenizer" && mounts["kvindex-tokenizer-0"]?.readOnly === true, "router-limits: tokenizer 0 from its PVC, read-only");
    check(volumes["kvindex-tokenizer-1"]?.configMap?.name === "qwen-tokenizer" && mounts["kvindex-tokenizer-1"]?.mountPath === "/etc/kvindex/tokenizers/1", "router-limits: tokenizer 1 from its ConfigMap");
  },
  sidecar(objects) {
    check(find(objects, "DaemonSet").length === 0, "sidecar: no DaemonSet");
    check(find(objects, "ConfigMap", "-agent-sidecar").length === 1, "sidecar: snippet ConfigMap");
  },
  servicemonitor(objects) {
    const ref = find(objects, "StatefulSet")[0].spec.template.spec.containers[0].env.find((e) => e.name === "KVINDEX_NATS");
    check(ref?.valueFrom?.secretKeyRef?.name === "kvindex-nats-url", "servicemonitor: the NATS URL from its Secret");
    const monitors = find(objects, "ServiceMonitor");
    check(monitors.length === 2, "servicemonitor: router and agent ServiceMonitors");
    for (const m of monitors) check(m.metadata.labels.release === "prometheus", "servicemonitor: extra labels");
    // Each selects exactly one Service of the release.
    for (const m of monitors) {
      const matched = find(objects, "Service").filter(
        (s) =>
          selects(m.spec.selector.matchLabels, s.metadata.labels) &&
          (m.spec.selector.matchExpressions || []).every((e) => e.operator !== "NotIn" || !e.values.includes(s.metadata.labels[e.key])),
      );
      check(matched.length === 1, `servicemonitor: ${m.metadata.name} selects ${matched.length} Services`);
      check(matched[0]?.spec.ports.some((p) => p.name === m.spec.endpoints[0].port), `servicemonitor: ${m.metadata.name} port exists`);
    }
  },
  hpa(objects) {
    const hpa = find(objects, "HorizontalPodAutoscaler")[0];
    const sts = find(objects, "StatefulSet")[0];
    check(hpa?.spec.scaleTargetRef.name === sts.metadata.name && hpa.spec.scaleTargetRef.kind === "StatefulSet", "hpa: targets the router StatefulSet");
    check(sts.spec.replicas === undefined, "hpa: the StatefulSet leaves replicas to the HPA");
  },
  networkpolicy(objects) {
    const policies = find(objects, "NetworkPolicy");
    check(policies.length === 2, "networkpolicy: router and agent policies");
    const router = find(objects, "NetworkPolicy", "-router")[0];
    const from = router.spec.ingress[0].from.map((p) => p.namespaceSelector.matchLabels["kubernetes.io/metadata.name"]);
    check(from.includes("gateway") && from.includes("monitoring"), "networkpolicy: API from gateway, metrics from monitoring");
    const egressPorts = router.spec.egress.flatMap((r) => r.ports.map((p) => `${p.protocol}/${p.port}`));
    check(JSON.stringify(egressPorts.sort()) === JSON.stringify(["TCP/4222", "TCP/53", "UDP/53"]), `networkpolicy: router egress NATS + DNS only (${egressPorts})`);
    const agent = find(objects, "NetworkPolicy", "-agent")[0];
    check(agent.spec.egress.some((r) => r.ports.some((p) => p.port === 5557)), "networkpolicy: agent reaches the engines");
  },
};

function envOf(workload, container) {
  const c = workload.spec.template.spec.containers.find((x) => x.name === container);
  return Object.fromEntries((c?.env || []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value]));
}

function renderTests() {
  const dashboard = JSON.parse(fs.readFileSync(path.join(repo, "docs/grafana-dashboard.json"), "utf8"));
  for (const set of valueSets()) {
    const before = failures;
    const objects = render(set.args);
    const where = `values ${set.name}`;
    const names = new Set();
    for (const o of objects) {
      validateObject(o, where);
      check(o.metadata.namespace === NAMESPACE || o.kind === "ConfigMap", `${where}: ${o.kind}/${o.metadata.name} in the release namespace`);
      const key = `${o.kind}/${o.metadata.name}`;
      check(!names.has(key), `${where}: ${key} rendered twice`);
      names.add(key);
      check(o.metadata.name.length <= 63 && DNS_LABEL.test(o.metadata.name), `${where}: ${key} is a DNS label`);
      check(o.metadata.labels?.["app.kubernetes.io/instance"] === RELEASE, `${where}: ${key} has the standard labels`);
    }
    for (const pod of podSpecs(objects)) {
      if (pod.snippet) validateObject(pod.snippet, `${where} (sidecar snippet)`);
      checkPodSecurity(pod);
    }
    // Workloads: selectors match their pods; Services select pods of the release.
    for (const w of [...find(objects, "StatefulSet"), ...find(objects, "DaemonSet")]) {
      check(selects(w.spec.selector.matchLabels, w.spec.template.metadata.labels), `${where}: ${w.kind} selector matches its pods`);
    }
    for (const s of find(objects, "Service")) {
      const pods = [...find(objects, "StatefulSet"), ...find(objects, "DaemonSet")].filter((w) => selects(s.spec.selector, w.spec.template.metadata.labels));
      check(pods.length === 1, `${where}: Service ${s.metadata.name} selects one workload`);
    }
    for (const sts of find(objects, "StatefulSet")) {
      const headless = find(objects, "Service").find((s) => s.metadata.name === sts.spec.serviceName);
      check(headless?.spec.clusterIP === "None", `${where}: StatefulSet serviceName is a headless Service`);
      const data = sts.spec.volumeClaimTemplates?.find((t) => t.metadata.name === "data");
      const router = sts.spec.template.spec.containers[0];
      const mount = router.volumeMounts.find((m) => m.name === "data");
      check(data && mount && mount.mountPath === envOf(sts, "kvindex-router").KVINDEX_DATA_DIR, `${where}: --data-dir is the PVC`);
    }
    for (const p of find(objects, "PodDisruptionBudget")) {
      check(find(objects, "StatefulSet").some((w) => selects(p.spec.selector.matchLabels, w.spec.template.metadata.labels)), `${where}: PDB selects the routers`);
    }
    const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"));
    if (set.name !== "agents-only") {
      check(cm?.metadata.labels.grafana_dashboard === "1", `${where}: dashboard ConfigMap with grafana_dashboard: "1"`);
      check(cm && JSON.stringify(JSON.parse(cm.data["kvindex.json"])) === JSON.stringify(dashboard), `${where}: the dashboard is docs/grafana-dashboard.json`);
    }
    const notes = renderNotes(set.args);
    const router = find(objects, "Service").find((x) => x.metadata.name.endsWith("-router"));
    if (router) {
      check(notes.includes(`port-forward svc/${router.metadata.name} 8080:8080`), `${where}: NOTES.txt shows how to reach ${router.metadata.name}\n${notes}`);
      check(notes.includes("localhost:8080/v1/match") && notes.includes("localhost:8080/v1/state"), `${where}: NOTES.txt shows /v1/match and /v1/state`);
      const token = envOf(find(objects, "StatefulSet")[0], "kvindex-router").KVINDEX_AUTH_TOKEN_FILE;
      check(notes.includes("Authorization: Bearer") === Boolean(token), `${where}: NOTES.txt sends the token exactly when one is required`);
    }
    for (const cm of find(objects, "ConfigMap", "-agent-sidecar")) {
      check(notes.includes(`configmap ${cm.metadata.name}`), `${where}: NOTES.txt names the sidecar ConfigMap`);
    }
    // NOTES.txt says what is open.
    const workload = [...find(objects, "StatefulSet"), ...find(objects, "DaemonSet")][0];
    const natsOpen = workload && !Object.keys(envOf(workload, workload.spec.template.spec.containers[0].name)).some((k) => /^KVINDEX_NATS_(USER|TOKEN_FILE|NKEY_SEED_FILE|CREDS_FILE)$/.test(k));
    check(notes.includes("What is open:"), `${where}: NOTES.txt has a 'What is open' section`);
    check(!workload || notes.includes("NATS: OPEN") === natsOpen, `${where}: NOTES.txt says NATS is open exactly when it has no credentials\n${notes}`);
    check(notes.includes("Network: OPEN") === (find(objects, "NetworkPolicy").length === 0), `${where}: NOTES.txt says the network is open exactly without a NetworkPolicy`);
    (expectations[set.name] || (() => check(false, `no expectations for value set ${set.name}`)))(objects);
    console.log(`render ${set.name}: ${objects.length} objects, ${failures === before ? "ok" : "FAILED"}`);
  }
}

// ---------------------------------------------------------------- schema
// Every file in bad-values/ must be refused; its first line says why:
//   # expect: <text the error must contain>
function schemaTests() {
  const files = fs.readdirSync(badValuesDir).filter((f) => f.endsWith(".yaml")).sort();
  check(files.length >= 5, `only ${files.length} negative value files`);
  for (const file of files) {
    const text = fs.readFileSync(path.join(badValuesDir, file), "utf8");
    const expect = /^# expect: (.+)$/m.exec(text)?.[1];
    if (!check(expect, `${file}: no '# expect:' line`)) continue;
    const result = template(["-f", path.join(badValuesDir, file)]);
    const ok =
      check(result.status !== 0, `${file}: accepted, should be refused (${expect})`) &&
      check(result.stderr.includes(expect), `${file}: refused, but not for '${expect}':\n${result.stderr}`);
    if (ok) console.log(`schema ${file}: refused (${expect})`);
  }
}

// ---------------------------------------------------------------- check-config
// Runs the real binary of a rendered container with --check-config, as the
// kubelet would start it: its env (field references filled, $(VAR)
// expanded), its Secret volumes written to a temporary folder (paths
// rewritten), nothing else in the environment.
const FIELDS = { "spec.nodeName": "node-1", "status.hostIP": "10.1.2.3", "status.podIP": "10.4.5.6", "metadata.name": "engine-0" };
// Values of secretKeyRef variables (Secret/key). Credentials in a URL are
// refused by the binaries (a negative case below).
const SECRET_VALUES = {
  "kvindex-nats-url/url": "nats://nats-0.nats:4222,nats://nats-1.nats:4222",
};
const redactUrl = (text) => text.replace(/:\/\/[^/,;@ ]*@/g, "://***@");

function prepareContainer(container, volumes, tmp, options = {}) {
  const mounts = [];
  const secrets = [];
  for (const m of container.volumeMounts || []) {
    const volume = volumes.find((v) => v.name === m.name);
    const local = path.join(tmp, m.name);
    if (volume?.secret && !(options.skipSecret === m.name)) {
      fs.mkdirSync(local, { recursive: true });
      for (const item of volume.secret.items || []) {
        const content = `secret-${volume.secret.secretName}-${item.key}-${Math.random().toString(36).slice(2)}`;
        fs.writeFileSync(path.join(local, item.path), content + "\n", { mode: 0o440 });
        secrets.push(content);
      }
    } else if (volume?.emptyDir) {
      fs.mkdirSync(local, { recursive: true });
    }
    // PVCs and skipped Secrets stay absent: --check-config must not need them.
    mounts.push([m.mountPath, local]);
  }
  const env = {};
  for (const e of container.env || []) {
    let value;
    if (e.value !== undefined) {
      // Kubernetes expands $(VAR) of variables defined earlier; $$ escapes.
      value = e.value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, name) => (all === "$$" ? "$" : name in env ? env[name] : all));
    } else if (e.valueFrom?.secretKeyRef) {
      const ref = e.valueFrom.secretKeyRef;
      value = SECRET_VALUES[`${ref.name}/${ref.key}`];
      if (value === undefined) throw new Error(`${container.name}: no test value for Secret ${ref.name} key ${ref.key}`);
      // A URL is no secret (it carries no credentials); other values are.
      if (!/^(nats|tls):\/\//.test(value)) secrets.push(value);
    } else if (e.valueFrom?.fieldRef) {
      value = FIELDS[e.valueFrom.fieldRef.fieldPath];
      if (value === undefined) throw new Error(`unknown fieldRef ${e.valueFrom.fieldRef.fieldPath}`);
    } else {
      throw new Error(`${container.name}: env ${e.name} has a source the test does not emulate`);
    }
    for (const [mountPath, local] of mounts) {
      if (value === mountPath || value.startsWith(mountPath + "/")) value = local + value.slice(mountPath.length);
    }
    env[e.name] = value;
  }
  return { env, secrets, mounts };
}

function runCheckConfig(binary, container, env, extraArgs = []) {
  const args = [...(container.command || []).slice(1), ...(container.args || []), ...extraArgs, "--check-config"];
  return run(binary, args, { env: { PATH: process.env.PATH, ...env } });
}

// Compares the printed configuration with what the chart set.
function checkPrinted(where, stdout, env) {
  let printed;
  try {
    printed = YAML.parse(stdout) || {};
  } catch (e) {
    return check(false, `${where}: --check-config output is not YAML: ${e.message}\n${stdout}`);
  }
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("KVINDEX_")) continue;
    const key = name.slice("KVINDEX_".length).toLowerCase();
    const got = printed[key];
    const expected = redactUrl(value);
    const same = Array.isArray(got) ? got.join(",") === expected || got.join(";") === expected : String(got) === expected;
    check(same, `${where}: ${name}=${value} but the binary took ${key}: ${JSON.stringify(got)}`);
  }
  return true;
}

function workloadContainers(objects) {
  const out = [];
  for (const o of objects) {
    if (o.kind === "StatefulSet" || o.kind === "DaemonSet") {
      for (const c of o.spec.template.spec.containers) out.push({ name: `${o.kind}/${c.name}`, container: c, volumes: o.spec.template.spec.volumes || [] });
    }
    if (o.kind === "ConfigMap" && o.metadata.name.endsWith("-agent-sidecar")) {
      const [c] = YAML.parse(o.data["container.yaml"]);
      out.push({ name: `sidecar/${c.name}`, container: c, volumes: YAML.parse(o.data["volumes.yaml"]) });
    }
  }
  return out;
}

function checkConfigTests(routerBinary, agentBinary) {
  const binaries = { "kvindex-router": routerBinary, "kvindex-agent": agentBinary };
  const tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), "kvindex-helm-"));
  let n = 0;
  const sets = [
    ...valueSets(),
    // A DaemonSet agent in the default values (the default set has none).
    { name: "default+agent", args: ["-f", path.join(valuesDir, "servicemonitor.yaml"), "--set", "serviceMonitor.enabled=false"] },
  ];
  try {
    for (const set of sets) {
      const seen = new Set();
      for (const { name, container, volumes } of workloadContainers(render(set.args))) {
        const binary = binaries[container.command?.[0]];
        if (!check(binary, `${set.name} ${name}: command ${container.command} is not a kvindex binary`)) continue;
        seen.add(container.command[0]);
        const tmp = path.join(tmpRoot, String(n++));
        const { env, secrets, mounts } = prepareContainer(container, volumes, tmp);
        const result = runCheckConfig(binary, container, env);
        const where = `${set.name} ${name}`;
        if (!check(result.status === 0, `${where}: --check-config exit ${result.status}:\n${result.stderr}`)) continue;
        checkPrinted(where, result.stdout, env);
        for (const secret of secrets) check(!result.stdout.includes(secret) && !result.stderr.includes(secret), `${where}: a secret's content was printed`);
        for (const [mountPath, local] of mounts) {
          if (mountPath === "/var/lib/kvindex") check(!fs.existsSync(local), `${where}: --check-config touched the data dir`);
        }
        console.log(`check-config ${where}: ok (${Object.keys(env).filter((k) => k.startsWith("KVINDEX_")).length} KVINDEX_* variables)`);
      }
      check(seen.has("kvindex-router") || set.name === "agents-only", `${set.name}: no router container checked`);
    }

    // Negative cases: the same containers, one thing broken each time.
    const negative = (label, setArgs, component, mutate, expectText) => {
      const item = workloadContainers(render(setArgs)).find((x) => x.container.command[0] === component);
      const tmp = path.join(tmpRoot, String(n++));
      const prepared = prepareContainer(item.container, item.volumes, tmp, mutate.prepare || {});
      if (mutate.env) mutate.env(prepared.env);
      const result = runCheckConfig(binaries[component], item.container, prepared.env);
      const ok =
        check(result.status === 2, `negative ${label}: exit ${result.status}, expected 2\n${result.stdout}${result.stderr}`) &&
        check(result.stderr.includes(expectText), `negative ${label}: stderr lacks '${expectText}':\n${result.stderr}`);
      if (ok) console.log(`check-config negative ${label}: exit 2 (${expectText})`);
    };
    const agentSet = ["-f", path.join(valuesDir, "networkpolicy.yaml")];
    // A value the schema allows but the binary refuses.
    negative("agent.config.lease=0", [...agentSet, "--set", "agent.config.lease=0s"], "kvindex-agent", {}, "--lease");
    // A variable the binary does not know (a renamed flag).
    negative("renamed variable", DEFAULT_ARGS, "kvindex-router", { env: (e) => { e.KVINDEX_CHECKPOINT_INTERVALS = e.KVINDEX_CHECKPOINT_INTERVAL; delete e.KVINDEX_CHECKPOINT_INTERVAL; } }, "KVINDEX_CHECKPOINT_INTERVALS");
    // A Secret that is not mounted: the file is unreadable.
    negative("missing TLS CA", ["-f", path.join(valuesDir, "tls.yaml")], "kvindex-router", { prepare: { skipSecret: "kvindex-nats-tls" } }, "--nats-tls-ca");
    negative("missing API token", ["-f", path.join(valuesDir, "auth-token.yaml")], "kvindex-router", { prepare: { skipSecret: "kvindex-auth" } }, "--auth-token-file");
    negative("bad stream storage", DEFAULT_ARGS, "kvindex-router", { env: (e) => { e.KVINDEX_STREAM_STORAGE = "disk"; } }, "--stream-storage");
    negative("max_nodes past 1024", DEFAULT_ARGS, "kvindex-router", { env: (e) => { e.KVINDEX_MAX_NODES = "5000"; } }, "--max-nodes");
    // Secrets only from files (issue #21): credentials in the NATS URL are refused.
    negative("credentials in the NATS URL", DEFAULT_ARGS, "kvindex-router", { env: (e) => { e.KVINDEX_NATS = "nats://kvindex:hunter2@nats:4222"; } }, "--nats-password-file");
    negative("credentials in the agent's NATS URL", agentSet, "kvindex-agent", { env: (e) => { e.KVINDEX_NATS = "nats://s3cret-token@nats:4222"; } }, "KVINDEX_NATS_TOKEN");
  } finally {
    fs.rmSync(tmpRoot, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- dockerfile
// Docker cannot run here: the Dockerfile is checked as text. Syntax
// (instructions, flags) with dockerfile-utils, the linter of the Docker
// language server; then its shape. Its runtime packages are checked against
// the binaries by dockerfile_runtime_test.py.
function dockerfileTests() {
  const file = path.join(repo, "Dockerfile");
  const text = fs.readFileSync(file, "utf8");
  const diagnostics = requireTool("dockerfile-utils").validate(text);
  for (const d of diagnostics) check(false, `Dockerfile:${d.range.start.line + 1}: ${d.message}`);
  const instructions = text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith("#"))
    .map((line) => {
      const [keyword, ...rest] = line.split(/\s+/);
      return { keyword: keyword.toUpperCase(), args: rest.join(" ") };
    });
  const froms = instructions.map((x, i) => [x, i]).filter(([x]) => x.keyword === "FROM");
  check(froms.length === 2, `Dockerfile: ${froms.length} stages, expected a build and a runtime stage`);
  check(/^debian:12(\s|$)/.test(froms[0]?.[0].args) && /\bAS build$/i.test(froms[0]?.[0].args), "Dockerfile: the build stage is FROM debian:12 AS build");
  check(/^debian:12(-slim)?$/.test(froms[1]?.[0].args), "Dockerfile: the runtime stage is Debian 12");
  const build = instructions.slice(froms[0]?.[1] ?? 0, froms[1]?.[1]);
  const runtime = instructions.slice(froms[1]?.[1] ?? instructions.length);
  check(build.some((x) => x.keyword === "RUN" && x.args.includes("scripts/install-deps.sh")), "Dockerfile: the build stage runs scripts/install-deps.sh");
  for (const binary of ["kvindex-router", "kvindex-agent"]) {
    check(build.some((x) => x.keyword === "RUN" && x.args.includes(`--target`) && x.args.includes(binary)), `Dockerfile: the build stage builds ${binary}`);
  }
  check(runtime.some((x) => x.keyword === "COPY" && x.args.startsWith("--from=build")), "Dockerfile: the runtime stage copies the binaries from the build stage");
  check(!runtime.some((x) => x.keyword === "RUN" && /install-deps|build-essential|cmake|-dev\b/.test(x.args)), "Dockerfile: no toolchain in the runtime stage");
  const users = runtime.filter((x) => x.keyword === "USER");
  const user = users.at(-1)?.args ?? "";
  check(/^[1-9][0-9]*(:[1-9][0-9]*)?$/.test(user), `Dockerfile: the runtime user is numeric and not root ('${user}'), so runAsNonRoot can verify it`);
  const values = YAML.parse(fs.readFileSync(path.join(chart, "values.yaml"), "utf8"));
  check(user.split(":")[0] === String(values.securityContext.runAsUser), "Dockerfile: USER is the chart's runAsUser");
  for (const binary of ["kvindex-router", "kvindex-agent"]) {
    check(text.includes(`/build/bin/${binary}`), `Dockerfile: ${binary} is installed into the image`);
  }
  console.log(`dockerfile: ${diagnostics.length} syntax diagnostics, ${instructions.length} instructions, user ${user}`);
}

// ---------------------------------------------------------------- main
const [mode, ...rest] = process.argv.slice(2);
const started = Date.now();
try {
  if (mode === "lint") lint();
  else if (mode === "render") renderTests();
  else if (mode === "schema") schemaTests();
  else if (mode === "dockerfile") dockerfileTests();
  else if (mode === "check-config") {
    if (rest.length !== 2) throw new Error("check-config needs ROUTER_BINARY AGENT_BINARY");
    checkConfigTests(...rest);
  } else throw new Error(`unknown mode '${mode}' (lint, render, schema, check-config, dockerfile)`);
} catch (e) {
  failures++;
  console.error(`FAIL: ${e.stack || e}`);
}
console.log(`${mode}: ${checks} checks, ${failures} failed, ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failures === 0 ? 0 : 1);
