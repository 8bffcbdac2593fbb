"""The audit hash is SHA-256 over the previous hash and the event's canonical
JSON; the fast assembly used when appending must produce exactly that."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from workflows.audit import journal
from workflows.db import canonical_json, sha256_hex

text = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@given(
    stream=text,
    seq=st.integers(min_value=1, max_value=2**62),
    micros=st.integers(0, 10**15),
    actor=text,
    verb=text,
    object_type=text,
    object_id=text | st.integers(),
    workflow_id=st.none() | st.uuids(),
    data=st.dictionaries(text, json_values, max_size=5),
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_the_appended_hash_is_the_hash_of_the_canonical_json(
    stream, seq, micros, actor, verb, object_type, object_id, workflow_id, data, prev
):
    at = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    expected = sha256_hex(
        prev
        + canonical_json(
            {
                "stream": stream,
                "seq": seq,
                "at": at.isoformat(),
                "actor": actor,
                "verb": verb,
                "object_type": object_type,
                "object_id": str(object_id),
                "workflow_id": str(workflow_id) if workflow_id else None,
                "data": data,
            }
        )
    )
    assert (
        journal.event_hash(
            prev,
            stream=stream,
            seq=seq,
            at=at,
            actor=actor,
            verb=verb,
            object_type=object_type,
            object_id=object_id,
            workflow_id=workflow_id,
            data=data,
        )
        == expected
    )
