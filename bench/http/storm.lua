-- wrk script of make bench, B9: POST /orders with an Idempotency-Key; each
-- key is sent WRK_COPIES times by consecutive requests of a thread, which
-- wrk spreads over its connections, so the copies arrive concurrently
-- (WRK_COPIES=1: a new key per request).  Keys: WRK_TAG-thread-n.
local copies = tonumber(os.getenv("WRK_COPIES") or "5")
local tag = os.getenv("WRK_TAG") or "bench"
local body = '{"sku": "sku-7", "qty": 1}'
local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end

local n = 0
function request()
    local key = tag .. "-" .. tid .. "-" .. math.floor(n / copies)
    n = n + 1
    return wrk.format("POST", "/orders",
        {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}, body)
end
