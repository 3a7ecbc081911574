-- now: the server's clock, epoch milliseconds.
return now_ms()
