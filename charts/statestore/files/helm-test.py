"""`helm test`: the service answers /readyz through its client Service, and one store can be read.

Runs in the statestore image (its own Python, no third-party module). Settings come from the
environment: TEST_URL, TEST_STORE, AUTH_MODE and, when auth.mode is tokens, TEST_TOKEN (without
one, an anonymous read must be refused).
"""

import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ["TEST_URL"].rstrip("/")
STORE = os.environ["TEST_STORE"]
TOKEN = os.environ.get("TEST_TOKEN", "")
TOKENS = os.environ.get("AUTH_MODE") == "tokens"
CA = "/etc/statestore/http-tls/ca.crt"


def tls_context():
    if not URL.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=CA if os.path.exists(CA) else None)
    # The certificate names the service as clients know it, not necessarily this Service's DNS name.
    context.check_hostname = False
    return context


def get(path, token=""):
    request = urllib.request.Request(URL + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls_context()) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError as error:
        sys.exit(f"FAIL: {URL}{path} does not answer ({error}): is any pod ready?")


def main():
    status, body = get("/readyz")
    print(f"GET /readyz -> {status}")
    if status != 200:
        sys.exit(f"FAIL: not ready: {body[:500].decode(errors='replace')}")
    store = "/v1/stores/" + urllib.parse.quote(STORE, safe="")
    if TOKENS and not TOKEN:
        status, _ = get(store)
        print(f"GET {store} without a token -> {status}")
        if status != 401:
            sys.exit("FAIL: auth.mode is tokens, yet an anonymous read was not refused with 401")
        print("OK: ready; anonymous reads are refused (give helmTest.bearerTokenSecret to read a store)")
        return
    status, body = get(store, TOKEN)
    print(f"GET {store} -> {status}")
    if status != 200:
        sys.exit(f"FAIL: {body[:500].decode(errors='replace')}")
    state = json.loads(body).get("state")
    status, body = get(store + "/scan?limit=1", TOKEN)
    print(f"GET {store}/scan?limit=1 -> {status}")
    if status != 200:
        sys.exit(f"FAIL: {body[:500].decode(errors='replace')}")
    print(f"OK: ready; store {STORE} is {state} and answers reads")


main()
