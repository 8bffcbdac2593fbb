"""Proposing a team's Cedar policy set and making it live, as its people do over the API."""


def propose(api, text, team="default", who="operator"):
    return api[who].post(f"/policy-sets/{team}/versions", {"text": text})


def make_live(api, text, team="default"):
    answer = propose(api, text, team)
    assert answer.status_code == 202, answer.content
    change = answer.json()["id"]
    decided = api["reviewer"].post(f"/policy-changes/{change}/authorize", {"reason": ""})
    assert decided.status_code == 200, decided.content
    return answer.json()
