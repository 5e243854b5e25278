<?php
echo 'Hello, world!';
