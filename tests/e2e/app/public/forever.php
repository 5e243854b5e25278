<?php
// Streams until the client goes away; records how it ended.
$marker = $_GET['marker'];
register_shutdown_function(function () use ($marker) {
    file_put_contents($marker, 'aborted=' . connection_aborted());
});
for ($i = 0; $i < 3000; $i++) {
    echo str_repeat('x', 8192), "\n";
    flush();
    usleep(10000);
}
