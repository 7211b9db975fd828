#!/usr/bin/env python3
"""The `openai` Python package against a running `serve`, used as its documentation shows.

    clients.py BASE_URL BASE_MODEL_ID ADAPTER_ID [API_KEY]

Checks: the model list (base, adapter, a refused adapter with its reason); a plain chat
completion; the same request streamed gives the same text; a `response_format` json_schema reply
that `jsonschema` validates, and the same through `chat.completions.parse` with a pydantic model;
a tool call whose arguments validate against the tool's parameters, and the conversation
continued with the tool's result; the same call streamed, its deltas joined as the package's
documentation joins them and through its `chat.completions.stream` helper; usage with
`prompt_tokens_details.cached_tokens`; a text completion; errors raised as the package's
exceptions (unknown model: NotFoundError; max_tokens 0: BadRequestError; with API_KEY, a wrong
key: AuthenticationError). Exits 1 on the first failure.
"""
import json
import sys

import jsonschema
import pydantic
from openai import AuthenticationError, BadRequestError, NotFoundError, OpenAI

base_url, base_id, adapter_id = sys.argv[1:4]
api_key = sys.argv[4] if len(sys.argv) > 4 else "not-needed"
client = OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=120)


def check(condition, what):
    if not condition:
        print(f"clients: FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"clients: ok: {what.splitlines()[0][:150]}")


# models
page = client.models.list()
ids = [m.id for m in page.data]
check(base_id in ids and adapter_id in ids, f"models lists the base and the adapter: {ids}")
refused = (page.model_extra or {}).get("refused") or []
check(any("was trained on base model" in r["reason"] for r in refused), f"a wrong-base adapter is listed as refused with the reason: {refused}")

# a plain chat completion, then the same request streamed
messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name three colours."}]
whole = client.chat.completions.create(model=adapter_id, messages=messages, max_tokens=40, temperature=0)
text = whole.choices[0].message.content
check(whole.object == "chat.completion" and whole.choices[0].finish_reason in ("stop", "length") and text,
      f"chat completion: {text!r} ({whole.choices[0].finish_reason}, {whole.usage.completion_tokens} tokens)")
check(whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens, "usage adds up")

stream = client.chat.completions.create(model=adapter_id, messages=messages, max_tokens=40, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
pieces, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        finish = choice.finish_reason or finish
check("".join(pieces) == text, f"streaming gives the same text in {len(pieces)} pieces")
check(finish == whole.choices[0].finish_reason and usage and usage.completion_tokens == whole.usage.completion_tokens,
      f"the stream ends with the finish reason and the usage ({finish}, {usage})")

# response_format: the extraction example's schema
schema = {"type": "object", "properties": {"title": {"type": "string"}, "day": {"type": "string"}, "start": {"type": "string"},
                                           "minutes": {"type": ["integer", "null"]}, "attendees": {"type": "array", "items": {"type": "string"}},
                                           "location": {"type": ["string", "null"]}},
          "required": ["title", "day", "start", "minutes", "attendees", "location"], "additionalProperties": False}
guided = client.chat.completions.create(
    model=adapter_id, max_tokens=200, temperature=0,
    messages=[{"role": "system", "content": "Turn the calendar request into JSON."},
              {"role": "user", "content": "lunch with Ana and Bo on Monday at 12:30 for 45m at Cafe Lune"}],
    response_format={"type": "json_schema", "json_schema": {"name": "Event", "strict": True, "schema": schema}})
reply = guided.choices[0].message.content
check(guided.choices[0].finish_reason == "stop", f"the guided reply is whole: {reply}")
jsonschema.validate(json.loads(reply), schema)
check(True, f"the guided reply validates against its schema: {reply}")


class Contact(pydantic.BaseModel):
    name: str
    age: int
    tags: list[str]


parsed = client.chat.completions.parse(model=base_id, max_tokens=120, temperature=0.7, seed=3,
                                       messages=[{"role": "user", "content": "Make up a contact."}], response_format=Contact)
check(isinstance(parsed.choices[0].message.parsed, Contact), f"chat.completions.parse gives a pydantic object: {parsed.choices[0].message.parsed!r}")

# a tool call (the tool-calling example's tool), then the conversation continued with its result
weather = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": weather}}]
ask = [{"role": "system", "content": "You are a helpful assistant with tools."}, {"role": "user", "content": "What is the weather in Oslo in celsius?"}]
called = client.chat.completions.create(model=adapter_id, messages=ask, tools=tools, tool_choice="required", max_tokens=120, temperature=0)
calls = called.choices[0].message.tool_calls
check(called.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "get_weather",
      f"a tool call: {calls}")
arguments = json.loads(calls[0].function.arguments)
jsonschema.validate(arguments, weather)
check(True, f"its arguments validate against the tool's parameters: {arguments}")
follow = client.chat.completions.create(
    model=adapter_id, tools=tools, max_tokens=40, temperature=0,
    messages=ask + [called.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": calls[0].id, "content": "-3 C, snow"}])
check(follow.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"the conversation continues after the tool's result: {follow.choices[0].message}")
details = follow.usage.prompt_tokens_details
check(details is not None and isinstance(details.cached_tokens, int) and 0 < details.cached_tokens <= follow.usage.prompt_tokens,
      f"the continued conversation reused the prompt cache: cached_tokens {details and details.cached_tokens} of {follow.usage.prompt_tokens}")

# the same call streamed: deltas joined per index as the package's documentation joins them
stream = client.chat.completions.create(model=adapter_id, messages=ask, tools=tools, tool_choice="required", max_tokens=120,
                                        temperature=0, stream=True, stream_options={"include_usage": True})
joined, finish, usage, repeated, deltas = {}, None, None, [], 0
for chunk in stream:
    usage = chunk.usage or usage
    for choice in chunk.choices:
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            deltas += 1
            if delta.index not in joined:
                joined[delta.index] = delta
            else:
                if delta.id is not None or delta.function.name is not None:
                    repeated.append(delta)
                joined[delta.index].function.arguments += delta.function.arguments
check(not repeated, f"a call's id and name come once, in its first delta: {repeated}")
# (parallel_tool_calls is true by default: the greedy reply may hold several calls, as the
# non-streamed one above does; streamed, each arrives under its own index)
check(finish == "tool_calls" and list(joined) == list(range(len(calls))) and deltas > len(joined)
      and all(joined[i].id and joined[i].function.name == calls[i].function.name
              and json.loads(joined[i].function.arguments) == json.loads(calls[i].function.arguments) for i in joined),
      f"the streamed tool calls in {deltas} deltas, joined per index, are the non-streamed ones ({len(calls)}): {joined}")
jsonschema.validate(json.loads(joined[0].function.arguments), weather)
check(True, f"its joined arguments validate against the tool's parameters: {joined[0].function.arguments}")
check(usage and usage.prompt_tokens_details and isinstance(usage.prompt_tokens_details.cached_tokens, int), f"the stream's usage: {usage}")
with client.chat.completions.stream(model=adapter_id, messages=ask, tools=tools, tool_choice="required", max_tokens=120, temperature=0) as helper:
    final = helper.get_final_completion()
helper_calls = final.choices[0].message.tool_calls
check(final.choices[0].finish_reason == "tool_calls" and helper_calls and helper_calls[0].function.name == "get_weather",
      f"chat.completions.stream assembles the call: {helper_calls}")
jsonschema.validate(json.loads(helper_calls[0].function.arguments), weather)
one = client.chat.completions.create(model=adapter_id, messages=ask, tools=tools, tool_choice="required", max_tokens=120,
                                     temperature=0, parallel_tool_calls=False, stream=True)
indexes = {d.index for chunk in one for choice in chunk.choices for d in (choice.delta.tool_calls or [])}
check(indexes == {0}, f"parallel_tool_calls false: one call, streamed under index 0 ({sorted(indexes)})")

# a text completion
completion = client.completions.create(model=base_id, prompt="The capital of France is", max_tokens=8, temperature=0)
check(completion.object == "text_completion" and completion.choices[0].text, f"text completion: {completion.choices[0].text!r}")

# errors come back as the package's exceptions
try:
    client.chat.completions.create(model="no-such-model", messages=messages)
    check(False, "an unknown model is refused")
except NotFoundError as e:
    check(e.status_code == 404 and e.body["code"] == "model_not_found", f"unknown model: 404 {e.body['message']}")
try:
    client.chat.completions.create(model=base_id, messages=messages, max_tokens=0)
    check(False, "max_tokens 0 is refused")
except BadRequestError as e:
    check(e.status_code == 400 and e.body["param"] == "max_tokens", f"max_tokens 0: 400 {e.body['message']}")
if len(sys.argv) > 4:
    try:
        OpenAI(base_url=base_url + "/v1", api_key="not-" + api_key, max_retries=0).models.list()
        check(False, "a wrong key is refused")
    except AuthenticationError as e:
        check(e.status_code == 401 and e.body["code"] == "invalid_api_key", f"a wrong key: 401 {e.body['message']}")
print("clients: all checks passed")
