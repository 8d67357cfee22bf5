"""The deferrable sensor that waits for a pass's lanes to drain."""
