"""Local fakes of cloud APIs that the tests drive through the real SDKs, over loopback."""
