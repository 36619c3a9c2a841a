from google.protobuf import field_mask_pb2 as _field_mask_pb2
from raftq._proto.google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckRequest(_message.Message):
    __slots__ = ["acks", "queue"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., acks: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ["attempt", "consumer", "ended_at_ms", "leased_at_ms", "outcome", "reason"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LEASED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    consumer: str
    ended_at_ms: int
    leased_at_ms: int
    outcome: str
    reason: str
    def __init__(self, attempt: _Optional[int] = ..., consumer: _Optional[str] = ..., leased_at_ms: _Optional[int] = ..., ended_at_ms: _Optional[int] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ["data", "info", "sha256", "size"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    info: BackupInfo
    sha256: str
    size: int
    def __init__(self, info: _Optional[_Union[BackupInfo, _Mapping]] = ..., data: _Optional[bytes] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class BackupInfo(_message.Message):
    __slots__ = ["cluster_version", "created_ms", "group", "index", "node_id", "term"]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    cluster_version: int
    created_ms: int
    group: str
    index: int
    node_id: str
    term: int
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., cluster_version: _Optional[int] = ..., node_id: _Optional[str] = ..., created_ms: _Optional[int] = ..., group: _Optional[str] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ["group"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class BuildInfo(_message.Message):
    __slots__ = ["commit", "go_version", "modified", "version"]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    GO_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    commit: str
    go_version: str
    modified: bool
    version: str
    def __init__(self, version: _Optional[str] = ..., commit: _Optional[str] = ..., modified: bool = ..., go_version: _Optional[str] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ["group"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class ClusterSettings(_message.Message):
    __slots__ = ["groups", "max_queued_bytes", "max_queues", "replicas"]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    groups: int
    max_queued_bytes: int
    max_queues: int
    replicas: int
    def __init__(self, max_queued_bytes: _Optional[int] = ..., max_queues: _Optional[int] = ..., groups: _Optional[int] = ..., replicas: _Optional[int] = ...) -> None: ...

class ConsumerInfo(_message.Message):
    __slots__ = ["acked", "address", "connected_since_ms", "credit", "delivered", "id", "identity", "in_flight", "max_in_flight", "name"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    acked: int
    address: str
    connected_since_ms: int
    credit: int
    delivered: int
    id: str
    identity: str
    in_flight: int
    max_in_flight: int
    name: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., identity: _Optional[str] = ..., connected_since_ms: _Optional[int] = ..., in_flight: _Optional[int] = ..., delivered: _Optional[int] = ..., acked: _Optional[int] = ..., credit: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., id: _Optional[str] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ["config", "group", "idempotency_key", "name"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    config: QueueConfig
    group: str
    idempotency_key: str
    name: str
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class CreateQueueResponse(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: QueueInfo
    def __init__(self, queue: _Optional[_Union[QueueInfo, _Mapping]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ["expires_in_ms", "idempotency_key", "identity", "name"]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    expires_in_ms: int
    idempotency_key: str
    identity: str
    name: str
    def __init__(self, name: _Optional[str] = ..., identity: _Optional[str] = ..., expires_in_ms: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ["expires_unix_ms", "identity", "name", "token"]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    expires_unix_ms: int
    identity: str
    name: str
    token: str
    def __init__(self, name: _Optional[str] = ..., identity: _Optional[str] = ..., token: _Optional[str] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ["idempotency_key", "if_empty", "if_unused", "name"]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IF_EMPTY_FIELD_NUMBER: _ClassVar[int]
    IF_UNUSED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    if_empty: bool
    if_unused: bool
    name: str
    def __init__(self, name: _Optional[str] = ..., if_empty: bool = ..., if_unused: bool = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Delivery(_message.Message):
    __slots__ = ["attempt", "dead_letter_reason", "enqueued_at_ms", "fairness_key", "headers", "history", "id", "last_error", "lease_deadline_ms", "lease_remaining_ms", "lease_token", "origin_queue", "payload", "priority", "queue", "throttle_keys", "weight"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_REASON_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    dead_letter_reason: str
    enqueued_at_ms: int
    fairness_key: str
    headers: _containers.ScalarMap[str, str]
    history: _containers.RepeatedCompositeFieldContainer[Attempt]
    id: str
    last_error: str
    lease_deadline_ms: int
    lease_remaining_ms: int
    lease_token: str
    origin_queue: str
    payload: bytes
    priority: int
    queue: str
    throttle_keys: _containers.RepeatedScalarFieldContainer[str]
    weight: int
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., weight: _Optional[int] = ..., throttle_keys: _Optional[_Iterable[str]] = ..., attempt: _Optional[int] = ..., enqueued_at_ms: _Optional[int] = ..., lease_token: _Optional[str] = ..., lease_deadline_ms: _Optional[int] = ..., origin_queue: _Optional[str] = ..., dead_letter_reason: _Optional[str] = ..., lease_remaining_ms: _Optional[int] = ..., history: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., last_error: _Optional[str] = ...) -> None: ...

class DrainEstimate(_message.Message):
    __slots__ = ["deliveries_per_sec", "depth_change_per_sec", "empties_in_sec", "state"]
    DELIVERIES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    DEPTH_CHANGE_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    EMPTIES_IN_SEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    deliveries_per_sec: float
    depth_change_per_sec: float
    empties_in_sec: float
    state: str
    def __init__(self, state: _Optional[str] = ..., depth_change_per_sec: _Optional[float] = ..., deliveries_per_sec: _Optional[float] = ..., empties_in_sec: _Optional[float] = ...) -> None: ...

class EnqueueMessage(_message.Message):
    __slots__ = ["concurrency_key", "dedup_id", "delay_ms", "fairness_key", "headers", "payload", "priority", "throttle_keys", "ttl_ms", "weight"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    concurrency_key: str
    dedup_id: str
    delay_ms: int
    fairness_key: str
    headers: _containers.ScalarMap[str, str]
    payload: bytes
    priority: int
    throttle_keys: _containers.RepeatedScalarFieldContainer[str]
    ttl_ms: int
    weight: int
    def __init__(self, payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., weight: _Optional[int] = ..., throttle_keys: _Optional[_Iterable[str]] = ..., delay_ms: _Optional[int] = ..., dedup_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., concurrency_key: _Optional[str] = ...) -> None: ...

class EnqueueRequest(_message.Message):
    __slots__ = ["messages", "queue"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[EnqueueMessage]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[EnqueueMessage, _Mapping]]] = ...) -> None: ...

class EnqueueResponse(_message.Message):
    __slots__ = ["message_ids"]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class EnqueueStreamRequest(_message.Message):
    __slots__ = ["request", "seq"]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    request: EnqueueRequest
    seq: int
    def __init__(self, seq: _Optional[int] = ..., request: _Optional[_Union[EnqueueRequest, _Mapping]] = ...) -> None: ...

class EnqueueStreamResponse(_message.Message):
    __slots__ = ["error", "response", "seq"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    error: _status_pb2.Status
    response: EnqueueResponse
    seq: int
    def __init__(self, seq: _Optional[int] = ..., response: _Optional[_Union[EnqueueResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class ExtendLeaseRequest(_message.Message):
    __slots__ = ["extend_by_ms", "leases", "queue"]
    EXTEND_BY_MS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    extend_by_ms: int
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., extend_by_ms: _Optional[int] = ...) -> None: ...

class ExtendLeaseResponse(_message.Message):
    __slots__ = ["deadlines_ms", "remaining_ms", "results"]
    DEADLINES_MS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    deadlines_ms: _containers.RepeatedScalarFieldContainer[int]
    remaining_ms: _containers.RepeatedScalarFieldContainer[int]
    results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ..., deadlines_ms: _Optional[_Iterable[int]] = ..., remaining_ms: _Optional[_Iterable[int]] = ...) -> None: ...

class FairnessKeyStats(_message.Message):
    __slots__ = ["deficit", "key", "pending", "weight"]
    DEFICIT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    deficit: int
    key: str
    pending: int
    weight: int
    def __init__(self, key: _Optional[str] = ..., pending: _Optional[int] = ..., deficit: _Optional[int] = ..., weight: _Optional[int] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ["message_id", "queue"]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ["events", "message", "state"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[MessageEvent]
    message: Delivery
    state: str
    def __init__(self, message: _Optional[_Union[Delivery, _Mapping]] = ..., state: _Optional[str] = ..., events: _Optional[_Iterable[_Union[MessageEvent, _Mapping]]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ["include_keys", "name"]
    INCLUDE_KEYS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    include_keys: bool
    name: str
    def __init__(self, name: _Optional[str] = ..., include_keys: bool = ...) -> None: ...

class GetQueueResponse(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: QueueInfo
    def __init__(self, queue: _Optional[_Union[QueueInfo, _Mapping]] = ...) -> None: ...

class GrantRequest(_message.Message):
    __slots__ = ["admin", "allow", "idempotency_key", "identity", "pattern"]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    admin: bool
    allow: _containers.RepeatedScalarFieldContainer[str]
    idempotency_key: str
    identity: str
    pattern: str
    def __init__(self, identity: _Optional[str] = ..., pattern: _Optional[str] = ..., allow: _Optional[_Iterable[str]] = ..., admin: bool = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class GrantResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class IdentityInfo(_message.Message):
    __slots__ = ["admin", "grants", "name", "tokens"]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    admin: bool
    grants: _containers.RepeatedCompositeFieldContainer[PermissionGrant]
    name: str
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, name: _Optional[str] = ..., admin: bool = ..., tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ..., grants: _Optional[_Iterable[_Union[PermissionGrant, _Mapping]]] = ...) -> None: ...

class ItemResult(_message.Message):
    __slots__ = ["code", "error", "ok"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    code: int
    error: str
    ok: bool
    def __init__(self, ok: bool = ..., code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ["lease_token", "message_id"]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    message_id: str
    def __init__(self, message_id: _Optional[str] = ..., lease_token: _Optional[str] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ["consumer_name", "limit", "max_batch_bytes", "max_in_flight", "queue", "visibility_timeout_ms"]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_name: str
    limit: int
    max_batch_bytes: int
    max_in_flight: int
    queue: str
    visibility_timeout_ms: int
    def __init__(self, queue: _Optional[str] = ..., consumer_name: _Optional[str] = ..., max_in_flight: _Optional[int] = ..., visibility_timeout_ms: _Optional[int] = ..., limit: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, messages: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ["force"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    force: bool
    def __init__(self, force: bool = ...) -> None: ...

class LeaveResponse(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListAuthRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListAuthResponse(_message.Message):
    __slots__ = ["identities"]
    IDENTITIES_FIELD_NUMBER: _ClassVar[int]
    identities: _containers.RepeatedCompositeFieldContainer[IdentityInfo]
    def __init__(self, identities: _Optional[_Iterable[_Union[IdentityInfo, _Mapping]]] = ...) -> None: ...

class ListConsumersRequest(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class ListConsumersResponse(_message.Message):
    __slots__ = ["consumers"]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInfo]
    def __init__(self, consumers: _Optional[_Iterable[_Union[ConsumerInfo, _Mapping]]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "prefix"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ["next_page_token", "queues"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LocalDigestRequest(_message.Message):
    __slots__ = ["group", "index"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    index: int
    def __init__(self, index: _Optional[int] = ..., group: _Optional[str] = ...) -> None: ...

class MessageEvent(_message.Message):
    __slots__ = ["at_ms", "detail", "kind"]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    detail: str
    kind: str
    def __init__(self, at_ms: _Optional[int] = ..., kind: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class MetaStatus(_message.Message):
    __slots__ = ["applied_index", "leader_id", "nonvoters", "placed_queues", "seeded", "voters"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    NONVOTERS_FIELD_NUMBER: _ClassVar[int]
    PLACED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    SEEDED_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    leader_id: str
    nonvoters: _containers.RepeatedScalarFieldContainer[str]
    placed_queues: int
    seeded: bool
    voters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, leader_id: _Optional[str] = ..., seeded: bool = ..., voters: _Optional[_Iterable[str]] = ..., nonvoters: _Optional[_Iterable[str]] = ..., applied_index: _Optional[int] = ..., placed_queues: _Optional[int] = ...) -> None: ...

class NackItem(_message.Message):
    __slots__ = ["dead_letter", "delay_ms", "lease_token", "message_id", "reason", "unprocessed"]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNPROCESSED_FIELD_NUMBER: _ClassVar[int]
    dead_letter: bool
    delay_ms: int
    lease_token: str
    message_id: str
    reason: str
    unprocessed: bool
    def __init__(self, message_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ..., dead_letter: bool = ..., unprocessed: bool = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ["nacks", "queue"]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    nacks: _containers.RepeatedCompositeFieldContainer[NackItem]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., nacks: _Optional[_Iterable[_Union[NackItem, _Mapping]]] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ["applied_index", "corrupt", "data_dir_free_bytes", "disk_low", "grpc_addr", "healthy", "http_addr", "id", "last_contact_ms", "max_log_version", "peer_grpc_addr", "raft_addr", "resident_memory_bytes", "started_at_ms", "state", "suffrage", "version", "zone"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_LOW_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_LOG_VERSION_FIELD_NUMBER: _ClassVar[int]
    PEER_GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUFFRAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    corrupt: str
    data_dir_free_bytes: int
    disk_low: bool
    grpc_addr: str
    healthy: bool
    http_addr: str
    id: str
    last_contact_ms: int
    max_log_version: int
    peer_grpc_addr: str
    raft_addr: str
    resident_memory_bytes: int
    started_at_ms: int
    state: str
    suffrage: str
    version: str
    zone: str
    def __init__(self, id: _Optional[str] = ..., grpc_addr: _Optional[str] = ..., raft_addr: _Optional[str] = ..., http_addr: _Optional[str] = ..., suffrage: _Optional[str] = ..., state: _Optional[str] = ..., healthy: bool = ..., last_contact_ms: _Optional[int] = ..., applied_index: _Optional[int] = ..., max_log_version: _Optional[int] = ..., peer_grpc_addr: _Optional[str] = ..., version: _Optional[str] = ..., disk_low: bool = ..., resident_memory_bytes: _Optional[int] = ..., data_dir_free_bytes: _Optional[int] = ..., started_at_ms: _Optional[int] = ..., corrupt: _Optional[str] = ..., zone: _Optional[str] = ...) -> None: ...

class NodeDigest(_message.Message):
    __slots__ = ["applied_index", "counters_ok", "digest", "error", "id"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_OK_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    counters_ok: bool
    digest: str
    error: str
    id: str
    def __init__(self, id: _Optional[str] = ..., applied_index: _Optional[int] = ..., digest: _Optional[str] = ..., counters_ok: bool = ..., error: _Optional[str] = ...) -> None: ...

class PauseQueueRequest(_message.Message):
    __slots__ = ["duration_ms", "fairness_key", "name"]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    fairness_key: str
    name: str
    def __init__(self, name: _Optional[str] = ..., fairness_key: _Optional[str] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class PauseQueueResponse(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: QueueInfo
    def __init__(self, queue: _Optional[_Union[QueueInfo, _Mapping]] = ...) -> None: ...

class PausedKey(_message.Message):
    __slots__ = ["key", "until_ms"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    until_ms: int
    def __init__(self, key: _Optional[str] = ..., until_ms: _Optional[int] = ...) -> None: ...

class PeekRequest(_message.Message):
    __slots__ = ["after_id", "dead_letter", "fairness_key", "limit", "older_than_ms", "queue", "reason_contains"]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REASON_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    after_id: str
    dead_letter: bool
    fairness_key: str
    limit: int
    older_than_ms: int
    queue: str
    reason_contains: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., dead_letter: bool = ..., fairness_key: _Optional[str] = ..., reason_contains: _Optional[str] = ..., older_than_ms: _Optional[int] = ..., after_id: _Optional[str] = ...) -> None: ...

class PeekResponse(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, messages: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class PermissionGrant(_message.Message):
    __slots__ = ["allow", "pattern"]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    pattern: str
    def __init__(self, pattern: _Optional[str] = ..., allow: _Optional[_Iterable[str]] = ...) -> None: ...

class PurgeQueueRequest(_message.Message):
    __slots__ = ["idempotency_key", "name"]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    name: str
    def __init__(self, name: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class PurgeQueueResponse(_message.Message):
    __slots__ = ["purged"]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class QueueConfig(_message.Message):
    __slots__ = ["concurrency_limit", "concurrency_limits", "dead_letter_queue", "dedup_window_ms", "fairness_quantum", "max_bytes", "max_deliveries", "max_depth", "max_message_bytes", "message_ttl_ms", "retry", "throttles", "visibility_timeout_ms"]
    class ConcurrencyLimitsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ThrottlesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ThrottleRule
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ThrottleRule, _Mapping]] = ...) -> None: ...
    CONCURRENCY_LIMITS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_QUANTUM_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    THROTTLES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    concurrency_limit: int
    concurrency_limits: _containers.ScalarMap[str, int]
    dead_letter_queue: str
    dedup_window_ms: int
    fairness_quantum: int
    max_bytes: int
    max_deliveries: int
    max_depth: int
    max_message_bytes: int
    message_ttl_ms: int
    retry: RetryPolicy
    throttles: _containers.MessageMap[str, ThrottleRule]
    visibility_timeout_ms: int
    def __init__(self, visibility_timeout_ms: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., dead_letter_queue: _Optional[str] = ..., max_depth: _Optional[int] = ..., max_bytes: _Optional[int] = ..., message_ttl_ms: _Optional[int] = ..., dedup_window_ms: _Optional[int] = ..., throttles: _Optional[_Mapping[str, ThrottleRule]] = ..., max_message_bytes: _Optional[int] = ..., fairness_quantum: _Optional[int] = ..., concurrency_limit: _Optional[int] = ..., concurrency_limits: _Optional[_Mapping[str, int]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ["config", "drain", "fairness_keys", "group", "is_dead_letter_queue", "name", "paused", "paused_keys", "paused_until_ms", "redrives", "stats", "throttle_keys"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEYS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    IS_DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_KEYS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    REDRIVES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    config: QueueConfig
    drain: DrainEstimate
    fairness_keys: _containers.RepeatedCompositeFieldContainer[FairnessKeyStats]
    group: str
    is_dead_letter_queue: bool
    name: str
    paused: bool
    paused_keys: _containers.RepeatedCompositeFieldContainer[PausedKey]
    paused_until_ms: int
    redrives: _containers.RepeatedCompositeFieldContainer[RedriveJob]
    stats: QueueStats
    throttle_keys: _containers.RepeatedCompositeFieldContainer[ThrottleKeyStats]
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., stats: _Optional[_Union[QueueStats, _Mapping]] = ..., is_dead_letter_queue: bool = ..., fairness_keys: _Optional[_Iterable[_Union[FairnessKeyStats, _Mapping]]] = ..., throttle_keys: _Optional[_Iterable[_Union[ThrottleKeyStats, _Mapping]]] = ..., drain: _Optional[_Union[DrainEstimate, _Mapping]] = ..., redrives: _Optional[_Iterable[_Union[RedriveJob, _Mapping]]] = ..., paused: bool = ..., paused_until_ms: _Optional[int] = ..., paused_keys: _Optional[_Iterable[_Union[PausedKey, _Mapping]]] = ..., group: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ["acked_total", "bytes", "consumers", "dead_lettered", "dedup_bytes", "dedup_entries", "delayed", "enqueued_total", "expired_total", "in_flight", "nacked_total", "ready", "recent_settled"]
    ACKED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    DEDUP_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NACKED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    RECENT_SETTLED_FIELD_NUMBER: _ClassVar[int]
    acked_total: int
    bytes: int
    consumers: int
    dead_lettered: int
    dedup_bytes: int
    dedup_entries: int
    delayed: int
    enqueued_total: int
    expired_total: int
    in_flight: int
    nacked_total: int
    ready: int
    recent_settled: int
    def __init__(self, ready: _Optional[int] = ..., delayed: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., enqueued_total: _Optional[int] = ..., acked_total: _Optional[int] = ..., nacked_total: _Optional[int] = ..., expired_total: _Optional[int] = ..., consumers: _Optional[int] = ..., bytes: _Optional[int] = ..., recent_settled: _Optional[int] = ..., dedup_entries: _Optional[int] = ..., dedup_bytes: _Optional[int] = ...) -> None: ...

class RecountQueuesRequest(_message.Message):
    __slots__ = ["queues", "reported_by"]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    REPORTED_BY_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    reported_by: str
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., reported_by: _Optional[str] = ...) -> None: ...

class RecountQueuesResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RedriveJob(_message.Message):
    __slots__ = ["fairness_key", "id", "last_moved_at_ms", "message_ids", "moved", "older_than_ms", "rate_per_sec", "reason_contains", "started_at_ms", "total"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MOVED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    REASON_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    id: str
    last_moved_at_ms: int
    message_ids: int
    moved: int
    older_than_ms: int
    rate_per_sec: float
    reason_contains: str
    started_at_ms: int
    total: int
    def __init__(self, id: _Optional[str] = ..., total: _Optional[int] = ..., moved: _Optional[int] = ..., rate_per_sec: _Optional[float] = ..., started_at_ms: _Optional[int] = ..., last_moved_at_ms: _Optional[int] = ..., fairness_key: _Optional[str] = ..., reason_contains: _Optional[str] = ..., older_than_ms: _Optional[int] = ..., message_ids: _Optional[int] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ["cancel_job", "dry_run", "fairness_key", "idempotency_key", "limit", "message_ids", "older_than_ms", "queue", "rate_per_sec", "reason_contains"]
    CANCEL_JOB_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    REASON_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    cancel_job: str
    dry_run: bool
    fairness_key: str
    idempotency_key: str
    limit: int
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    older_than_ms: int
    queue: str
    rate_per_sec: float
    reason_contains: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., fairness_key: _Optional[str] = ..., reason_contains: _Optional[str] = ..., older_than_ms: _Optional[int] = ..., dry_run: bool = ..., rate_per_sec: _Optional[float] = ..., message_ids: _Optional[_Iterable[str]] = ..., cancel_job: _Optional[str] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ["job_id", "moved"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    moved: int
    def __init__(self, moved: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class RefusedMember(_message.Message):
    __slots__ = ["cluster_id", "gossip_addr", "id", "reason"]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    GOSSIP_ADDR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    gossip_addr: str
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., gossip_addr: _Optional[str] = ..., cluster_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ["force", "id"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    force: bool
    id: str
    def __init__(self, id: _Optional[str] = ..., force: bool = ...) -> None: ...

class RemoveNodeResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RepairCorruptRequest(_message.Message):
    __slots__ = ["node_id", "reason"]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RepairCorruptResponse(_message.Message):
    __slots__ = ["deferred", "removed"]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    deferred: str
    removed: bool
    def __init__(self, removed: bool = ..., deferred: _Optional[str] = ...) -> None: ...

class ReportDivergenceRequest(_message.Message):
    __slots__ = ["digest", "group", "index", "leader_id", "removed"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    digest: str
    group: str
    index: int
    leader_id: str
    removed: bool
    def __init__(self, index: _Optional[int] = ..., digest: _Optional[str] = ..., leader_id: _Optional[str] = ..., removed: bool = ..., group: _Optional[str] = ...) -> None: ...

class ReportDivergenceResponse(_message.Message):
    __slots__ = ["digest", "diverged"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    digest: str
    diverged: bool
    def __init__(self, diverged: bool = ..., digest: _Optional[str] = ...) -> None: ...

class ResumeQueueRequest(_message.Message):
    __slots__ = ["fairness_key", "name"]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    fairness_key: str
    name: str
    def __init__(self, name: _Optional[str] = ..., fairness_key: _Optional[str] = ...) -> None: ...

class ResumeQueueResponse(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: QueueInfo
    def __init__(self, queue: _Optional[_Union[QueueInfo, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ["initial_delay_ms", "jitter", "max_delay_ms", "multiplier"]
    INITIAL_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    initial_delay_ms: int
    jitter: float
    max_delay_ms: int
    multiplier: float
    def __init__(self, initial_delay_ms: _Optional[int] = ..., max_delay_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., jitter: _Optional[float] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ["idempotency_key", "name"]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    name: str
    def __init__(self, name: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SetClusterSettingsRequest(_message.Message):
    __slots__ = ["groups", "idempotency_key", "max_queued_bytes", "max_queues", "replicas"]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    groups: int
    idempotency_key: str
    max_queued_bytes: int
    max_queues: int
    replicas: int
    def __init__(self, max_queued_bytes: _Optional[int] = ..., max_queues: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., groups: _Optional[int] = ..., replicas: _Optional[int] = ...) -> None: ...

class SetClusterSettingsResponse(_message.Message):
    __slots__ = ["settings"]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    settings: ClusterSettings
    def __init__(self, settings: _Optional[_Union[ClusterSettings, _Mapping]] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ["group"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ["index"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ["group", "local_only"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    local_only: bool
    def __init__(self, local_only: bool = ..., group: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ["applied_index", "cluster_id", "cluster_version", "commit_index", "held_bytes", "leader_addr", "leader_id", "meta", "nodes", "refused_members", "settings", "term", "withheld"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    HELD_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    cluster_id: str
    cluster_version: int
    commit_index: int
    held_bytes: int
    leader_addr: str
    leader_id: str
    meta: MetaStatus
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    refused_members: _containers.RepeatedCompositeFieldContainer[RefusedMember]
    settings: ClusterSettings
    term: int
    withheld: bool
    def __init__(self, leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., cluster_version: _Optional[int] = ..., settings: _Optional[_Union[ClusterSettings, _Mapping]] = ..., held_bytes: _Optional[int] = ..., withheld: bool = ..., cluster_id: _Optional[str] = ..., refused_members: _Optional[_Iterable[_Union[RefusedMember, _Mapping]]] = ..., meta: _Optional[_Union[MetaStatus, _Mapping]] = ...) -> None: ...

class ThrottleKeyStats(_message.Message):
    __slots__ = ["burst", "key", "rate_per_sec", "tokens"]
    BURST_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    burst: int
    key: str
    rate_per_sec: float
    tokens: float
    def __init__(self, key: _Optional[str] = ..., tokens: _Optional[float] = ..., rate_per_sec: _Optional[float] = ..., burst: _Optional[int] = ...) -> None: ...

class ThrottleRule(_message.Message):
    __slots__ = ["burst", "rate_per_sec"]
    BURST_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    burst: int
    rate_per_sec: float
    def __init__(self, rate_per_sec: _Optional[float] = ..., burst: _Optional[int] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ["created_unix_ms", "expires_unix_ms", "name"]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    created_unix_ms: int
    expires_unix_ms: int
    name: str
    def __init__(self, name: _Optional[str] = ..., created_unix_ms: _Optional[int] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ["group", "to_id"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TO_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    to_id: str
    def __init__(self, to_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ["new_leader_id"]
    NEW_LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    new_leader_id: str
    def __init__(self, new_leader_id: _Optional[str] = ...) -> None: ...

class UngrantRequest(_message.Message):
    __slots__ = ["admin", "idempotency_key", "identity", "pattern"]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    admin: bool
    idempotency_key: str
    identity: str
    pattern: str
    def __init__(self, identity: _Optional[str] = ..., pattern: _Optional[str] = ..., admin: bool = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class UngrantResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ["config", "idempotency_key", "name", "update_mask"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    config: QueueConfig
    idempotency_key: str
    name: str
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class UpdateQueueResponse(_message.Message):
    __slots__ = ["queue"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: QueueInfo
    def __init__(self, queue: _Optional[_Union[QueueInfo, _Mapping]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ["group"]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ["consistent", "inconsistent_ids", "nodes"]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    INCONSISTENT_IDS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    consistent: bool
    inconsistent_ids: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeDigest]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeDigest, _Mapping]]] = ..., consistent: bool = ..., inconsistent_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ["admin", "grants", "identity", "kind"]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    admin: bool
    grants: _containers.RepeatedCompositeFieldContainer[PermissionGrant]
    identity: str
    kind: str
    def __init__(self, identity: _Optional[str] = ..., kind: _Optional[str] = ..., admin: bool = ..., grants: _Optional[_Iterable[_Union[PermissionGrant, _Mapping]]] = ...) -> None: ...
