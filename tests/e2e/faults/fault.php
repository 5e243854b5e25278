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

// Fails when a session that holds it is read: PHP code inside request startup.
class FaultOnWakeup
{
    public string $kind = '';

    public function __wakeup(): void
    {
        fault($this->kind);
    }
}
