<?php
header("HTTP/1.1 418 I'm a teapot");
echo 'short and stout';
