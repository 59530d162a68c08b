"""The scheduler: its loop and process, waiting-queue policies, Req, the requests' grammars."""
