"""The network's plain arithmetic: fair shares of links."""
