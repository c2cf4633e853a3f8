-- Shared by every script: keys live until their state is no longer needed,
-- plus this margin (sluice.KeyTTLMargin), which keeps state across small
-- differences between the deciding clock and the expiring one.
local TTL_MARGIN_MS = 1000
