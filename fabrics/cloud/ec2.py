"""AWS EC2 through boto3: instances tagged with their pool and launch id, launched with a client token.

boto3 is imported here only, so the web process starts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from fabrics.cloud.base import (
    LAUNCH_TAG,
    POOL_TAG,
    CloudError,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    ProviderConfig,
)

# EC2's error codes by what they mean for the autoscaler; any other code is taken as a bad request.
_KINDS = {
    ErrorKind.CAPACITY: {
        "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacity",
        "InsufficientReservedInstanceCapacity", "Unsupported", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded", "VcpuLimitExceeded",
    },
    ErrorKind.THROTTLED: {"RequestLimitExceeded", "Throttling", "ThrottlingException"},
    ErrorKind.CREDENTIALS: {
        "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch", "OptInRequired",
        "Blocked", "ExpiredToken", "AccessDenied",
    },
    ErrorKind.UNAVAILABLE: {"ServiceUnavailable", "Unavailable", "InternalError", "InternalFailure"},
}  # fmt: skip
_BY_CODE = {code: kind for kind, codes in _KINDS.items() for code in codes}

# "pending" | "running" | "shutting-down" | "terminated" | "stopping" | "stopped"
_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.STOPPING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
}


def classify(error: Exception) -> CloudError:
    """botocore's exception as a CloudError whose kind says whether a retry, another type or IT can help."""
    if isinstance(error, botocore.exceptions.ClientError):
        info = error.response.get("Error", {})
        code = str(info.get("Code", ""))
        kind = _BY_CODE.get(code, ErrorKind.INVALID)
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code not in _BY_CODE and status >= 500:
            kind = ErrorKind.UNAVAILABLE
        return CloudError(f"EC2 {code}: {info.get('Message', '')}".strip(), kind=kind, code=code)
    if isinstance(error, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return CloudError(f"EC2: {error}", kind=ErrorKind.CREDENTIALS)
    if isinstance(error, botocore.exceptions.BotoCoreError):  # connection refused, timeouts
        return CloudError(f"EC2 did not answer: {error}", kind=ErrorKind.UNAVAILABLE)
    raise error


class Ec2Provider:
    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        creds = config.credentials
        self.client: Any = boto3.session.Session().client(
            "ec2",
            region_name=config.region,
            endpoint_url=config.endpoint_url or None,
            aws_access_key_id=creds.key_id,
            aws_secret_access_key=creds.secret,
            aws_session_token=creds.session_token or None,
            config=botocore.config.Config(
                connect_timeout=config.timeout_s,
                read_timeout=config.timeout_s,
                retries={"mode": "standard", "max_attempts": 2},  # the autoscaler retries on its next cycle
            ),
        )

    def _call(self, operation: str, **params: Any) -> Any:
        try:
            return getattr(self.client, operation)(**params)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as error:
            raise classify(error) from None

    def launch(self, request: LaunchRequest) -> Instance:
        # Find first, then launch: the client token makes EC2 itself idempotent, and the tag covers a provider
        # (or a double) that ignores the token, and a retry whose parameters changed.
        for found in self.find(request.pool, request.launch_id):
            if not found.state.gone:
                return found
        tags = [
            {"Key": POOL_TAG, "Value": request.pool},
            {"Key": LAUNCH_TAG, "Value": request.launch_id},
            {"Key": "Name", "Value": request.name or f"{request.pool}-{request.launch_id[:8]}"},
        ]
        params: dict[str, Any] = {
            "ImageId": request.image,
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": request.user_data,
            "ClientToken": request.client_token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        }
        if request.zone:
            params["Placement"] = {"AvailabilityZone": request.zone}
        if request.spot:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        try:
            answer = self._call("run_instances", **params)
        except CloudError as error:
            if error.code != "IdempotentParameterMismatch":
                raise
            # This token already launched, with other user data (a retry mints a new enrollment token): that one.
            alive = [i for i in self.find(request.pool, request.launch_id) if not i.state.gone]
            if not alive:
                raise
            return alive[0]
        return _instance(answer["Instances"][0], request.pool)

    def find(self, pool: str, launch_id: str) -> list[Instance]:
        """The instances one launch id names (one, or none; terminated ones included)."""
        return self.describe(pool, [{"Name": f"tag:{LAUNCH_TAG}", "Values": [launch_id]}])

    def describe(self, pool: str, more: list[dict[str, Any]] | None = None) -> list[Instance]:
        found: list[Instance] = []
        token = None
        while True:
            filters = [{"Name": f"tag:{POOL_TAG}", "Values": [pool]}, *(more or [])]
            params: dict[str, Any] = {"Filters": filters, "MaxResults": 500}
            if token:
                params["NextToken"] = token
            answer = self._call("describe_instances", **params)
            for reservation in answer.get("Reservations", []):
                found.extend(_instance(i, pool) for i in reservation.get("Instances", []))
            token = answer.get("NextToken")
            if not token:
                return found

    def terminate(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        try:
            self._call("terminate_instances", InstanceIds=list(ids))
        except CloudError as error:
            if error.code != "InvalidInstanceID.NotFound":
                raise
            for one in ids:  # one of them is gone already: end the others one by one
                try:
                    self._call("terminate_instances", InstanceIds=[one])
                except CloudError as again:
                    if again.code != "InvalidInstanceID.NotFound":
                        raise

    def user_data(self, instance_id: str) -> str:
        """The instance's user data as it was launched (the test harness boots from it)."""
        import base64

        answer = self._call("describe_instance_attribute", InstanceId=instance_id, Attribute="userData")
        raw = answer.get("UserData", {}).get("Value", "")
        return base64.b64decode(raw).decode() if raw else ""


def _instance(raw: dict[str, Any], pool: str) -> Instance:
    """One EC2 instance as JSON: {"InstanceId": "i-...", "State": {"Name": "running"}, "Tags": [...], ...}."""
    tags = {t.get("Key"): t.get("Value", "") for t in raw.get("Tags", [])}
    reason = raw.get("StateReason", {}).get("Message", "") or raw.get("StateTransitionReason", "")
    return Instance(
        id=str(raw["InstanceId"]),
        state=_STATES.get(str(raw.get("State", {}).get("Name", "")), InstanceState.UNDETERMINED),
        pool=str(tags.get(POOL_TAG, pool)),
        launch_id=str(tags.get(LAUNCH_TAG, "")),
        instance_type=str(raw.get("InstanceType", "")),
        zone=str(raw.get("Placement", {}).get("AvailabilityZone", "")),
        spot=raw.get("InstanceLifecycle") == "spot",
        launched_at=raw.get("LaunchTime"),
        reason=str(reason)[:300],
    )
