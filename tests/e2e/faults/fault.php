<?php
// One way for PHP code to fail, by name: what the fault tests inject in every phase.
function fault(string $kind): void
{
    switch ($kind) {
        case 'fatal':
            undefined_function_on_purpose();
            break;
        case 'exception':
            throw new DomainException('fault on purpose');
        case 'exit':
            exit(3);
        case 'timeout':
            set_time_limit(1);
            $end = microtime(true) + 10;
            while (microtime(true) < $end) {
            }
            break;
        case 'memory':
            $hog = [];
            while (true) {
                $hog[] = str_repeat('x', 1 << 20);
            }
    }
}

// Fails now ("now": before any output is sent), or when the request's output is flushed
// ("shutdown": from an output buffer callback, after the script or handler returned), or
// in a shutdown function ("shutdown-function", classic mode).
function fault_in(string $phase, string $kind): void
{
    // ?big=<MB> first sends that much output, in 64 KB writes: a response that has left
    // the PHP thread for its buffer and spill file when the fault comes.
    for ($i = 0, $n = (int) ($_GET['big'] ?? 0) * 16; $i < $n; $i++) {
        echo str_repeat('x', 65536);
    }
    switch ($phase) {
        case 'now':
            echo "before the fault\n";
            fault($kind);
            break;
        case 'shutdown':
            ob_start(function (string $buffer) use ($kind) {
                fault($kind);
                return $buffer;
            });
            break;
        case 'shutdown-function':
            register_shutdown_function(function () use ($kind) {
                fault($kind);
            });
            break;
    }
}

// Fails when a session that holds it is read: PHP code inside request startup.
class FaultOnWakeup
{
    public string $kind = '';

    public function __wakeup(): void
    {
        fault($this->kind);
    }
}
