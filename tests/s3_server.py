"""A real S3 server for the runs store's tests: moto's server mode, in this process, on 127.0.0.1
with a free port. Nothing reaches a real cloud: the endpoint is set, the instance metadata
service and the GCE check are off, the credentials are dummies, and no AWS profile is read."""

import logging
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

# Dummy credentials: the tests check that neither reaches a file.
ACCESS_KEY = "AKIAPROBETESTDUMMY0001"
SECRET_KEY = "probe-test-secret-0b1e5c8a9d2f4e6a7b3c1d0e"


def start() -> tuple[object, str]:
    """(the server, its endpoint URL), or a skip saying why it cannot start."""
    try:
        import s3fs  # noqa: F401
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        pytest.skip(f"the runs store's tests need moto[server] and s3fs ({exc.name} is missing): "
                    "pip install -e '.[dev]'")
    import botocore

    if tuple(int(part) for part in botocore.__version__.split(".")[:2]) < (1, 31):
        pytest.skip(f"botocore {botocore.__version__} ignores AWS_ENDPOINT_URL (1.31 or later reads it)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on stderr
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        server.start()
        host, port = server.get_host_and_port()
    except Exception as exc:  # any reason at all: the tests skip, saying it
        pytest.skip(f"moto's S3 server could not start on 127.0.0.1 ({type(exc).__name__}: {exc})")
    return server, f"http://{host}:{port}"


def environment(endpoint: str, tmp_path: Path) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_GCE_CHECK": "true",
        # No profile of the machine's is read; the caches of this test stay in its folder.
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        # Should anything still aim past the endpoint, it meets a proxy that is not there.
        "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }


def new_bucket(endpoint: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A fresh bucket on the server, with the test's environment set for this process."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "PROBE_RUNS_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    import boto3

    bucket = f"probe-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    client.create_bucket(Bucket=bucket)
    return SimpleNamespace(url=f"s3://{bucket}/team/runs", bucket=bucket, prefix="team/runs", client=client,
                           env=env, endpoint=endpoint)
