<?php
// Fails in the way ?do= asks, inside the handler.
$count = 0;
while (frankenphp_handle_request(function () use (&$count) {
    $count++;
    switch ($_GET['do'] ?? '') {
        case 'exception':
            echo "partial output\n";
            throw new DomainException('thrown on purpose');
        case 'fatal':
            echo "partial output\n";
            undefined_function_on_purpose();
            break;
        case 'exit':
            echo "exiting\n";
            exit(1);
        case 'die':
            die("dying\n");
        case 'timeout':
            set_time_limit(1);
            $end = microtime(true) + 5;
            while (microtime(true) < $end) {
            }
            echo "not reached\n";
            break;
        case 'redirect-exit':
            header('Location: /elsewhere');
            exit;
    }
    echo 'count:', $count;
})) {
}
