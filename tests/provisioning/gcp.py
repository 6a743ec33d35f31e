"""Helpers of the GCP tests: SDK clients of the Compute Engine fake, as someone else's."""

from google.api_core.client_options import ClientOptions
from google.oauth2 import service_account

from tests.fakes.gce import service_account_key


def compute(gcp, client_class):
    """A client of the fake with a key of its own: what a user does in Google's console."""
    key = service_account_key(gcp, email="tester@zopday-sandbox.iam.gserviceaccount.com")
    credentials = service_account.Credentials.from_service_account_info(
        key, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    return client_class(credentials=credentials, client_options=ClientOptions(api_endpoint=gcp.url))
