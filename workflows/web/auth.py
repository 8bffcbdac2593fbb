"""Login throttling for HTTP logins (django-axes).

Only requests can be throttled: a credential check made in code without a
request (the test client, a management command) is not a login attempt from
anywhere, so it passes through to the next backend instead of failing.
"""

import time

from axes.backends import AxesStandaloneBackend

# When this session signed in (seconds since the epoch): a decision from a
# review link needs a sign-in younger than DECISION_MAX_AUTH_AGE.
SIGNED_IN_AT = "durableconsole.signed_in_at"


def remember_sign_in(sender, request, user, **kwargs):
    """`user_logged_in` receiver (connected in `WorkflowsConfig.ready`)."""
    if request is not None and hasattr(request, "session"):
        request.session[SIGNED_IN_AT] = int(time.time())


class ThrottledLogins(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
