"""Fixtures of the storage tests: an S3-compatible server (moto's, in server mode) on loopback.

moto runs in a child process so the conformance suite's RSS bounds measure the client alone
(the server keeps every object in its own memory)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

SERVER = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server that lives for the session."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    endpoint = proc.stdout.readline().strip()
    assert endpoint.startswith("http://127.0.0.1:"), f"moto did not start: {endpoint!r}"
    try:
        yield endpoint
    finally:
        proc.stdin.close()
        proc.stdout.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A fresh, empty bucket on the session's moto server."""
    import uuid

    name = f"b-{uuid.uuid4().hex[:16]}"
    make_bucket(s3_endpoint, name)
    return name


def make_bucket(endpoint: str, name: str) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=name)
