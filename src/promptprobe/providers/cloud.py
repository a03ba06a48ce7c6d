"""The clouds people reach these models through, by the SDKs' own client classes: Azure OpenAI
(`AzureOpenAI`), Amazon Bedrock (`AnthropicBedrock`) and Google Vertex (`AnthropicVertex`).
Calls, errors and replies are the OpenAI and Anthropic providers' own; only the client differs.
Credentials come from the environment or the cloud's standard chain and are never written."""

import importlib
import os
import re
from typing import Any

from ..errors import InputError, StartError
from ..models import ModelSpec
from ..redaction import SCRUBBER
from . import CLOUD_SECRETS, VERTEX_TOKEN_ENV
from .anthropic_provider import AnthropicProvider
from .base import GenerationParams, Provider
from .openai_provider import OpenAIBatch, OpenAIProvider

AZURE_API_VERSION = "2024-10-21"  # the latest GA data-plane version with batches
# A region names a host (bedrock-runtime.REGION.amazonaws.com, REGION-aiplatform.googleapis.com).
REGION = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def require_extra(spec: ModelSpec, modules: tuple[str, ...], extra: str) -> None:
    """A one-sentence StartError naming the optional install when a cloud's library is missing."""
    missing = [name for name in modules if not _importable(name)]
    if missing:
        raise StartError(
            f"model {spec.spec}: {spec.provider} models need {', '.join(missing)}, which is not installed: "
            f"pip install 'promptprobe[{extra}]'"
        )


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def checked_region(spec: ModelSpec, region: str, source: str) -> str:
    """The region, or an InputError when it cannot be part of a host name (never a DNS lookup of it)."""
    if not REGION.fullmatch(region):
        raise InputError(
            f"model {spec.spec}: region {region!r} (from {source}) is not a region name such as us-east-1"
        )
    return region


def aws_credentials_problem(region: str) -> str | None:
    """Why the AWS credential chain gives no credentials (None when it does): found out before
    the run starts, since the SDK finds out only inside each call."""
    import boto3
    import botocore.exceptions

    try:
        found = boto3.Session(region_name=region).get_credentials()
    except botocore.exceptions.BotoCoreError as exc:
        return str(exc)
    return None if found is not None else "the AWS credential chain found none"


def scrub_cloud_secrets() -> None:
    for name in CLOUD_SECRETS:
        value = os.environ.get(name)
        if value:
            SCRUBBER.add(name, value)


class AzureProvider(OpenAIProvider):
    """`azure:DEPLOYMENT@https://RESOURCE.openai.azure.com`; the deployment is the body's model."""

    def make_client(self, options: dict[str, Any]) -> Any:
        import openai

        options.pop("base_url", None)
        return openai.AzureOpenAI(
            azure_endpoint=self.spec.base_url,
            api_version=self.spec.api_version or AZURE_API_VERSION,
            **options,
        )

    def batch_api(self) -> OpenAIBatch:
        return OpenAIBatch(self, "/chat/completions")  # Azure's batch lines name the path without /v1


class BedrockProvider(AnthropicProvider):
    """`bedrock:MODEL`: SigV4-signed calls with the AWS credentials and region of the environment."""

    batch_api = Provider.batch_api  # Bedrock's batch inference goes through S3, not this API

    def make_client(self, options: dict[str, Any]) -> Any:
        import anthropic

        options.pop("api_key", None)
        region = self.region()
        if not os.environ.get("AWS_BEARER_TOKEN_BEDROCK"):
            problem = aws_credentials_problem(region)
            if problem:
                raise StartError(
                    f"model {self.spec.spec}: no AWS credentials for Bedrock ({problem}; set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or AWS_BEARER_TOKEN_BEDROCK)"
                )
        return anthropic.AnthropicBedrock(aws_region=region, **options)

    def region(self) -> str:
        """The region from the first place that names one."""
        for value, source in (
            (self.spec.region, "the model's table in probe.toml"),
            (os.environ.get("AWS_REGION"), "AWS_REGION"),
            (os.environ.get("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"),
        ):
            if value:
                return checked_region(self.spec, value, source)
        import boto3
        import botocore.exceptions

        try:
            region = boto3.Session().region_name  # the profile's, if it has one
        except botocore.exceptions.BotoCoreError as exc:
            raise StartError(
                f"model {self.spec.spec}: cannot read a region from the AWS profile ({exc})"
            ) from None
        if not region:
            raise StartError(
                f"model {self.spec.spec}: no region for Bedrock (set region in the model's table in "
                "probe.toml, AWS_REGION, or a region in your AWS profile)"
            )
        return checked_region(self.spec, region, "the AWS profile")


class VertexProvider(AnthropicProvider):
    """`vertex:MODEL`: the project and region from the model's table or the environment."""

    batch_api = Provider.batch_api  # Vertex batch prediction reads from Cloud Storage or BigQuery

    def make_client(self, options: dict[str, Any]) -> Any:
        import anthropic

        options.pop("api_key", None)
        region = self.spec.region or os.environ.get("CLOUD_ML_REGION")
        if not region:
            raise StartError(
                f"model {self.spec.spec}: no region for Vertex (set region in the model's table in "
                "probe.toml, or CLOUD_ML_REGION)"
            )
        source = "the model's table in probe.toml" if self.spec.region else "CLOUD_ML_REGION"
        checked_region(self.spec, region, source)
        project = self.spec.project or os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
        token = os.environ.get(VERTEX_TOKEN_ENV) or None
        if token and not project:  # only Google's credential chain could name the project
            raise StartError(
                f"model {self.spec.spec}: no project for Vertex (set project in the model's table in "
                "probe.toml, or ANTHROPIC_VERTEX_PROJECT_ID)"
            )
        return anthropic.AnthropicVertex(
            region=region, **({"project_id": project} if project else {}), access_token=token, **options
        )


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> Provider:
    scrub_cloud_secrets()
    try:
        return _make(spec, params, key)
    except ValueError as exc:  # the SDK's own word on a missing region or project
        raise StartError(f"model {spec.spec}: {exc}") from None


def _make(spec: ModelSpec, params: GenerationParams, key: str | None) -> Provider:
    if spec.provider == "azure":
        return AzureProvider(spec, params, key)
    if spec.provider == "bedrock":
        require_extra(spec, ("boto3", "botocore"), "bedrock")
        return BedrockProvider(spec, params, key)
    if not os.environ.get(VERTEX_TOKEN_ENV):
        require_extra(spec, ("google.auth",), "vertex")
    return VertexProvider(spec, params, key)
