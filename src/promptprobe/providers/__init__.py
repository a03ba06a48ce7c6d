"""Providers: one small interface, one module per API; the SDK is imported only when used."""

from .base import Completion, GenerationParams, Provider, ProviderError, make_provider

__all__ = ["Completion", "GenerationParams", "Provider", "ProviderError", "make_provider"]
