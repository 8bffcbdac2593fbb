"""Login throttling for HTTP logins (django-axes).

Only requests can be throttled: a credential check made in code without a
request (the test client, a management command) is not a login attempt from
anywhere, so it passes through to the next backend instead of failing.
"""

from axes.backends import AxesStandaloneBackend


class ThrottledLogins(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
