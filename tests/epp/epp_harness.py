"""The gateway side of Envoy's ext_proc, for tests: python stubs generated at
test time from kvindex's own .proto declarations (shared/epp/proto) with
protoc, and a Stream that sends ProcessingRequest messages the way Envoy's
ext_proc filter does and reads the answers one at a time.

Needs Debian's python3-grpcio and python3-protobuf, and protoc.
"""

import os
import queue
import shutil
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "shared", "epp", "proto")
PROTOS = ["envoy/config/core/v3/base.proto", "envoy/type/v3/http_status.proto",
          "envoy/service/ext_proc/v3/external_processor.proto"]

_gen_dir = tempfile.mkdtemp(prefix="kvindex-epp-pb-")
subprocess.run(["protoc", "-I", PROTO_DIR, "-I", "/usr/include", "--python_out=" + _gen_dir] +
               [os.path.join(PROTO_DIR, p) for p in PROTOS], check=True)
# health.proto's python module must not live under "grpc/" (the grpc package
# itself): the same file, compiled from another folder name.
os.makedirs(os.path.join(_gen_dir, "src", "kvindex_health"))
shutil.copy(os.path.join(PROTO_DIR, "grpc", "health", "v1", "health.proto"),
            os.path.join(_gen_dir, "src", "kvindex_health", "health.proto"))
subprocess.run(["protoc", "-I", os.path.join(_gen_dir, "src"), "--python_out=" + _gen_dir,
                os.path.join(_gen_dir, "src", "kvindex_health", "health.proto")], check=True)
sys.path.insert(0, _gen_dir)

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb  # noqa: E402
from kvindex_health import health_pb2  # noqa: E402

PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"


def header_map(headers):
    m = pb.ProcessingRequest().request_headers.headers.__class__()
    for key, value in headers.items():
        h = m.headers.add()
        h.key = key
        h.raw_value = value.encode()
    return m


class Stream:
    """One ext_proc stream = one HTTP request through the gateway."""

    def __init__(self, channel, timeout=10):
        self.requests = queue.Queue()
        call = channel.stream_stream(PROCESS, request_serializer=pb.ProcessingRequest.SerializeToString,
                                     response_deserializer=pb.ProcessingResponse.FromString)
        self.call = call(iter(self.requests.get, None), timeout=timeout)

    def send(self, request):
        self.requests.put(request)

    def headers(self, path="/v1/completions", end_of_stream=False, subset=None, mode=None,
                response_mode=None):
        r = pb.ProcessingRequest()
        r.request_headers.headers.CopyFrom(header_map({":method": "POST", ":path": path,
                                                       "content-type": "application/json"}))
        r.request_headers.end_of_stream = end_of_stream
        if subset is not None:
            r.metadata_context.filter_metadata["envoy.lb.subset_hint"].update(
                {"x-gateway-destination-endpoint-subset": subset})
        if mode is not None or response_mode is not None:
            r.protocol_config.request_body_mode = mode or pb.FULL_DUPLEX_STREAMED
            r.protocol_config.response_body_mode = response_mode or pb.FULL_DUPLEX_STREAMED
        self.send(r)

    def body(self, data, end_of_stream):
        r = pb.ProcessingRequest()
        r.request_body.body = data
        r.request_body.end_of_stream = end_of_stream
        self.send(r)

    def trailers(self):
        r = pb.ProcessingRequest()
        r.request_trailers.trailers.CopyFrom(header_map({"x-t": "1"}))
        self.send(r)

    def response_headers(self, served=None):
        r = pb.ProcessingRequest()
        r.response_headers.headers.CopyFrom(header_map({":status": "200"}))
        if served is not None:
            r.metadata_context.filter_metadata["envoy.lb"].update(
                {"x-gateway-destination-endpoint-served": served})
        self.send(r)

    def response_body(self, data, end_of_stream):
        r = pb.ProcessingRequest()
        r.response_body.body = data
        r.response_body.end_of_stream = end_of_stream
        self.send(r)

    def response_trailers(self):
        r = pb.ProcessingRequest()
        r.response_trailers.trailers.CopyFrom(header_map({"x-t": "1"}))
        self.send(r)

    def recv(self):
        return next(self.call)

    def close(self):
        """Envoy half-closes: no more messages."""
        self.requests.put(None)

    def cancel(self):
        self.call.cancel()

    def finished(self):
        """The server ended the stream (the iterator is exhausted)."""
        try:
            next(self.call)
        except StopIteration:
            return True
        return False


def pick_of(response):
    """(header value, metadata value, clear_route_cache) of the answer carrying the pick."""
    which = response.WhichOneof("response")
    common = getattr(response, which).response
    values = [h.header.raw_value.decode() or h.header.value
              for h in common.header_mutation.set_headers
              if h.header.key == "x-gateway-destination-endpoint"]
    meta = response.dynamic_metadata.fields["envoy.lb"].struct_value.fields[
        "x-gateway-destination-endpoint"].string_value
    return (values[0] if values else None), meta, common.clear_route_cache


def health(channel, service):
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                               response_deserializer=health_pb2.HealthCheckResponse.FromString)
    try:
        return call(health_pb2.HealthCheckRequest(service=service), timeout=5).status
    except grpc.RpcError as error:
        return error.code()


def tls_channel(address, ca_pem, server_name=None):
    """A channel to the picker over TLS, trusting only `ca_pem` (bytes); its own
    subchannels, so a new channel makes a new connection (a new handshake)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    if server_name is not None:
        options.append(("grpc.ssl_target_name_override", server_name))
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca_pem),
                               options=options)


def pick(channel, body, timeout=10):
    """One buffered-at-once pick (headers, then the whole body): the answer
    carrying the pick, or the ImmediateResponse."""
    s = Stream(channel, timeout=timeout)
    s.headers()
    s.body(body, True)
    first = s.recv()
    s.cancel()
    return first
