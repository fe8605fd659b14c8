"""ModelClient's error contract: in-band errors are returned, a deadline raises TimeoutError,
refused unary calls raise GRPCError, a request of the wrong type raises InvalidValueError."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.errors import InvalidValueError
from protocol_py_gen.model.v1 import ErrorKind, RenderRequest

from ..support.servers import Running, make_request


async def test_client_error_contract_as_the_readme_states_it(running: Running) -> None:
    """README "Client": in-band errors return, a deadline raises TimeoutError, refused unary
    calls raise GRPCError, a wrong request type raises InvalidValueError."""
    async with ModelClient.connect(running.address) as client:
        done = await client.complete(make_request(model="no-such-model"), timeout=30)
        assert done.stop is None and done.error is not None
        assert done.error.kind == ErrorKind.INVALID_REQUEST
        with pytest.raises(GRPCError) as refused:
            await client.configure({"nope": 1}, timeout=30)
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(GRPCError) as refused:
            await client.render(RenderRequest(payload_type="reference.nope", payload=b"{}"))
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(InvalidValueError, match="expected a StreamCompletionRequest"):
            await client.complete("not a request", timeout=30)  # type: ignore[arg-type]
        await client.configure({"pace_tokens_per_second": 5}, timeout=30)
        with pytest.raises(TimeoutError):
            await client.complete(make_request(), timeout=0.3)
        assert (await client.describe(timeout=30)).name == "reference"  # still serving
