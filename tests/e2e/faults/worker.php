<?php
// A worker that fails where it is told: FAULT_PHASE=boot or after (the code after the
// loop) with FAULT_KIND from the environment; ?phase=handler|shutdown&kind=... per request.
require __DIR__ . '/fault.php';

$phase = getenv('FAULT_PHASE') ?: '';
$kind = getenv('FAULT_KIND') ?: '';
if ($phase === 'boot') {
    fault($kind);
}
$held = str_repeat('h', (int) (getenv('HOLD_MB') ?: 0) << 20); // memory the booted app keeps
$served = 0;
while (frankenphp_handle_request(function () use (&$served) {
    $served++;
    header('X-Pid: ' . getmypid()); // which process ran it, under `processes 2`
    $phase = $_GET['phase'] ?? '';
    fault_in($phase === 'handler' ? 'now' : $phase, $_GET['kind'] ?? '');
    echo 'served:', $served, ' session:', session_status() === PHP_SESSION_ACTIVE ? 'active' : 'none';
})) {
}
if ($phase === 'after') {
    fault($kind);
}
