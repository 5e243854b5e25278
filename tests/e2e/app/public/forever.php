<?php
// Streams until the client goes away; records how it ended. With ignore_user_abort off
// (classic mode's default) PHP ends the script at the first failed write and the
// shutdown function records it; with it on (worker mode's default) the loop sees it.
$record = function () {
    file_put_contents($_GET['marker'], 'aborted=' . connection_aborted());
};
if (!ignore_user_abort()) {
    register_shutdown_function($record);
}
for ($i = 0; $i < 3000; $i++) {
    echo str_repeat('x', 8192), "\n";
    flush();
    if (connection_aborted()) {
        break;
    }
    usleep(10000);
}
$record();
