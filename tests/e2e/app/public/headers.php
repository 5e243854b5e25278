<?php
header('X-Custom: one');
header('X-Removed: gone');
header('X-Multi: a');
header('X-Multi: b', false);
header_remove('X-Removed');
setcookie('a', '1');
setcookie('b', '2', ['path' => '/', 'httponly' => true]);
setcookie('c', '3');
http_response_code(202);
$before = headers_sent();
echo 'sent-before-output:', $before ? 'yes' : 'no', "\n";
flush();
echo 'sent-after-flush:', headers_sent() ? 'yes' : 'no', "\n";
