<?php
// The OS thread running this PHP code (PHP has no function for it outside debug builds).
function thread_id(): int
{
    return (int) basename((string) readlink('/proc/thread-self'));
}
