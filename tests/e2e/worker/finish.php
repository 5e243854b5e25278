<?php
// Answers, then keeps working after fastcgi_finish_request().
while (frankenphp_handle_request(function () {
    echo 'answered';
    $first = fastcgi_finish_request();
    $second = frankenphp_finish_request();
    echo 'this is discarded';
    usleep(1500000);
    file_put_contents($_GET['marker'], json_encode([$first, $second]));
})) {
}
